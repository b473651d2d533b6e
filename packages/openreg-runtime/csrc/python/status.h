// status.h — runtime status codes as Python exceptions, for every bindings file.
//
// A failing call raises StatusError carrying the code and the runtime's
// message; the module's exception translator turns it into the matching
// openreg_runtime.errors class.
#pragma once

#include <exception>
#include <string>
#include <utility>

#include "openreg.h"

namespace openreg_python {

struct StatusError : std::exception {
  orError_t code;
  std::string message;
  StatusError(orError_t code, std::string message) : code(code), message(std::move(message)) {}
  const char* what() const noexcept override { return message.c_str(); }
};

inline void checkStatus(orError_t status) {
  if (status == orSuccess) return;
  std::string message = orGetLastErrorMessage();
  orGetLastError();  // the error is reported here; do not leave it pending
  if (message.empty()) message = orGetErrorString(status);
  throw StatusError(status, message);
}

}  // namespace openreg_python
