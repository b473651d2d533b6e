// errors.cpp — error names/strings and the per-thread last error (C API).
#include "errors.h"

namespace openreg::runtime {
namespace {
thread_local orError_t lastErrorCode = orSuccess;
thread_local std::string lastErrorMessage;
}  // namespace

void setLastError(orError_t code, const std::string& message) {
  lastErrorCode = code;
  lastErrorMessage = message;
}

}  // namespace openreg::runtime

using openreg::runtime::lastErrorCode;
using openreg::runtime::lastErrorMessage;

extern "C" {

const char* orGetErrorName(orError_t error) {
  switch (error) {
    case orSuccess:
      return "orSuccess";
    case orErrorInvalidValue:
      return "orErrorInvalidValue";
    case orErrorOutOfMemory:
      return "orErrorOutOfMemory";
    case orErrorInitialization:
      return "orErrorInitialization";
    case orErrorInvalidDevice:
      return "orErrorInvalidDevice";
    case orErrorInvalidDevicePointer:
      return "orErrorInvalidDevicePointer";
    case orErrorInvalidHostPointer:
      return "orErrorInvalidHostPointer";
    case orErrorInvalidMemcpyDirection:
      return "orErrorInvalidMemcpyDirection";
    case orErrorNotReady:
      return "orErrorNotReady";
    case orErrorInvalidResourceHandle:
      return "orErrorInvalidResourceHandle";
    case orErrorDeviceMismatch:
      return "orErrorDeviceMismatch";
    case orErrorLaunchFailure:
      return "orErrorLaunchFailure";
    case orErrorNotPermitted:
      return "orErrorNotPermitted";
    case orErrorUnknown:
      return "orErrorUnknown";
  }
  return "orErrorUnrecognized";
}

const char* orGetErrorString(orError_t error) {
  switch (error) {
    case orSuccess:
      return "no error";
    case orErrorInvalidValue:
      return "invalid argument";
    case orErrorOutOfMemory:
      return "out of device memory";
    case orErrorInitialization:
      return "runtime initialization error";
    case orErrorInvalidDevice:
      return "invalid device ordinal";
    case orErrorInvalidDevicePointer:
      return "invalid device pointer";
    case orErrorInvalidHostPointer:
      return "invalid pinned host pointer";
    case orErrorInvalidMemcpyDirection:
      return "invalid copy direction for these pointers";
    case orErrorNotReady:
      return "work not completed yet";
    case orErrorInvalidResourceHandle:
      return "invalid or destroyed stream/event handle";
    case orErrorDeviceMismatch:
      return "stream and event belong to different devices";
    case orErrorLaunchFailure:
      return "work enqueued on a stream failed";
    case orErrorNotPermitted:
      return "operation not permitted";
    case orErrorUnknown:
      return "unknown error";
  }
  return "unrecognized error code";
}

orError_t orGetLastError(void) {
  orError_t code = lastErrorCode;
  lastErrorCode = orSuccess;
  return code;
}

orError_t orPeekAtLastError(void) { return lastErrorCode; }

const char* orGetLastErrorMessage(void) { return lastErrorMessage.c_str(); }

orError_t orRuntimeGetVersion(int* version) {
  return openreg::runtime::runApi([&] {
    openreg::runtime::checkNotNull(version, "version");
    *version = OPENREG_VERSION_MAJOR * 1000 + OPENREG_VERSION_MINOR * 10;
  });
}

}  // extern "C"
