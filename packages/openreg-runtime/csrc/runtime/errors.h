// errors.h — internal error type and the per-thread "last error" record.
//
// Internals throw ApiError; every C entry point runs its body through
// runApi(), which turns an ApiError (or any other exception) into the
// returned orError_t plus the thread's last-error code and message. This
// keeps validation code linear and guarantees no exception crosses the C ABI.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "openreg.h"

namespace openreg::runtime {

class ApiError : public std::runtime_error {
 public:
  ApiError(orError_t code, const std::string& message) : std::runtime_error(message), code_(code) {}
  orError_t code() const { return code_; }

 private:
  orError_t code_;
};

// Builds a message from streamable parts: fail(orErrorInvalidValue, "size ", n).
template <typename... Parts>
[[noreturn]] void fail(orError_t code, const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw ApiError(code, message.str());
}

template <typename... Parts>
void check(bool condition, orError_t code, const Parts&... parts) {
  if (!condition) fail(code, parts...);
}

// Records a failure in the calling thread's last-error slot.
void setLastError(orError_t code, const std::string& message);

// Runs an API body; returns orSuccess or the code of the error it raised.
template <typename Body>
orError_t runApi(Body&& body) noexcept {
  try {
    body();
    return orSuccess;
  } catch (const ApiError& error) {
    setLastError(error.code(), error.what());
    return error.code();
  } catch (const std::bad_alloc&) {
    setLastError(orErrorUnknown, "host memory exhausted inside the OpenReg runtime");
    return orErrorUnknown;
  } catch (const std::exception& error) {
    setLastError(orErrorUnknown, error.what());
    return orErrorUnknown;
  } catch (...) {
    setLastError(orErrorUnknown, "unknown internal error in the OpenReg runtime");
    return orErrorUnknown;
  }
}

template <typename T>
void checkNotNull(const T* pointer, const char* name) {
  check(pointer != nullptr, orErrorInvalidValue, name, " must not be NULL");
}

}  // namespace openreg::runtime
