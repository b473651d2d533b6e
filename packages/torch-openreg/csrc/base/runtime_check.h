// runtime_check.h — turns OpenReg runtime error codes into PyTorch errors.
//
// Every call into openreg.h goes through OPENREG_CHECK, so a failing runtime
// call becomes a c10::Error carrying the runtime's own message (which names
// the problem and the fix); out-of-memory becomes c10::OutOfMemoryError,
// i.e. torch.OutOfMemoryError in Python.
#pragma once

#include <openreg.h>

#include <c10/macros/Macros.h>

namespace torch_openreg {

[[noreturn]] void throwRuntimeError(orError_t status, const char* call);

// For query calls: true when the work is complete, false when it is not yet
// (orErrorNotReady); any other status raises.
bool completed(orError_t status, const char* call);

}  // namespace torch_openreg

#define OPENREG_CHECK(expression)                                            \
  do {                                                                       \
    const orError_t openreg_status_ = (expression);                          \
    if (C10_UNLIKELY(openreg_status_ != orSuccess)) {                        \
      ::torch_openreg::throwRuntimeError(openreg_status_, #expression);      \
    }                                                                        \
  } while (false)
