// runtime_check.h — turns OpenReg runtime error codes into PyTorch errors.
//
// Every call into openreg.h whose failure matters goes through OPENREG_CHECK,
// so a failing runtime call becomes a c10::Error carrying the runtime's own
// message (which names the problem and the fix) and the error's name;
// out-of-memory becomes c10::OutOfMemoryError, i.e. torch.OutOfMemoryError in
// Python. Calls whose failure is deliberately ignored go through succeeded(),
// which also clears the runtime's per-thread last error.
#pragma once

#include <openreg.h>

#include <c10/macros/Macros.h>

namespace torch_openreg {

[[noreturn]] void throwRuntimeError(orError_t status);

// For query calls: true when the work is complete, false when it is not yet
// (orErrorNotReady); any other status raises.
bool completed(orError_t status);

// True on success; on failure, forgets the error (nothing pending for the
// next caller of orGetLastError) and returns false.
inline bool succeeded(orError_t status) noexcept {
  if (C10_LIKELY(status == orSuccess)) return true;
  orGetLastError();
  return false;
}

}  // namespace torch_openreg

#define OPENREG_CHECK(expression)                          \
  do {                                                     \
    const orError_t openreg_status_ = (expression);        \
    if (C10_UNLIKELY(openreg_status_ != orSuccess)) {      \
      ::torch_openreg::throwRuntimeError(openreg_status_); \
    }                                                      \
  } while (false)
