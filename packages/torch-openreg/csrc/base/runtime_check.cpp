// runtime_check.cpp — error conversion for OPENREG_CHECK.
#include "base/runtime_check.h"

#include <c10/util/Exception.h>

#include <string>

namespace torch_openreg {

void throwRuntimeError(orError_t status) {
  std::string message = orGetLastErrorMessage();
  orGetLastError();  // reported now; do not leave it pending for the next caller
  if (message.empty()) message = orGetErrorString(status);
  // The runtime's messages end with the error's name; keep exactly one.
  const std::string name = orGetErrorName(status);
  if (message.find(name) == std::string::npos) message += " (" + name + ")";
  TORCH_CHECK_WITH(OutOfMemoryError, status != orErrorOutOfMemory, message);
  TORCH_CHECK(false, message);
}

bool completed(orError_t status) {
  if (status == orErrorNotReady) {
    orGetLastError();
    return false;
  }
  if (status != orSuccess) throwRuntimeError(status);
  return true;
}

}  // namespace torch_openreg
