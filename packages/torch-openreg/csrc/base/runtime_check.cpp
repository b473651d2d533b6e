// runtime_check.cpp — error conversion for OPENREG_CHECK.
#include "base/runtime_check.h"

#include <c10/util/Exception.h>

#include <string>

namespace torch_openreg {

void throwRuntimeError(orError_t status, const char* call) {
  std::string message = orGetLastErrorMessage();
  orGetLastError();  // reported now; do not leave it pending for the next caller
  if (message.empty()) message = orGetErrorString(status);
  message += " [";
  message += orGetErrorName(status);
  message += " from ";
  message += call;
  message += "]";
  TORCH_CHECK_WITH(OutOfMemoryError, status != orErrorOutOfMemory, message);
  TORCH_CHECK(false, message);
}

bool completed(orError_t status, const char* call) {
  if (status == orErrorNotReady) {
    orGetLastError();
    return false;
  }
  if (status != orSuccess) throwRuntimeError(status, call);
  return true;
}

}  // namespace torch_openreg
