// api_device.cpp — C entry points for devices.
#include <optional>
#include <string>

#include "errors.h"
#include "runtime.h"

using namespace openreg::runtime;

extern "C" {

orError_t orGetDeviceCount(int* count) {
  return runApi([&] {
    checkNotNull(count, "count");
    *count = Runtime::instance().deviceCount();
  });
}

orError_t orSetDevice(int device) {
  return runApi([&] { Runtime::instance().setCurrentDevice(device); });
}

orError_t orGetDevice(int* device) {
  return runApi([&] {
    checkNotNull(device, "device");
    *device = Runtime::instance().currentDeviceIndex();
  });
}

orError_t orDeviceSynchronize(void) {
  return runApi([&] {
    Device& device = Runtime::instance().currentDevice();
    refuseInsideStreamWork("orDeviceSynchronize");
    std::optional<ApiError> firstFailure;
    // Wait for every stream before reporting, so the device is idle on return.
    for (const auto& stream : device.liveStreams()) {
      try {
        synchronizeOrThrow(*stream);
      } catch (const ApiError& failure) {
        if (!firstFailure) firstFailure = failure;
      }
    }
    pendingReleases().releaseCompleted();
    if (firstFailure) throw *firstFailure;
  });
}

}  // extern "C"
