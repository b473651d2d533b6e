// device.cpp — current device / count helpers over the runtime.
#include "base/device.h"

#include <c10/util/Exception.h>

#include <array>
#include <atomic>

#include "base/runtime_check.h"

namespace torch_openreg {
namespace {
std::array<std::atomic<bool>, OPENREG_MAX_DEVICES> usedDevices{};
}  // namespace

c10::DeviceIndex deviceCount() noexcept {
  int count = 0;
  if (orGetDeviceCount(&count) != orSuccess) {
    orGetLastError();
    return 0;
  }
  return static_cast<c10::DeviceIndex>(count);
}

c10::DeviceIndex currentDevice() {
  int device = 0;
  OPENREG_CHECK(orGetDevice(&device));
  return static_cast<c10::DeviceIndex>(device);
}

void setCurrentDevice(c10::DeviceIndex device) { OPENREG_CHECK(orSetDevice(checkedDevice(device))); }

c10::DeviceIndex checkedDevice(c10::DeviceIndex device) {
  int count = 0;
  OPENREG_CHECK(orGetDeviceCount(&count));
  TORCH_CHECK(device >= 0 && device < count, "Invalid openreg device index ", static_cast<int>(device),
              ": there are ", count, " openreg devices (valid indices 0..", count - 1,
              "); set OPENREG_DEVICE_COUNT to change the count");
  return device;
}

c10::DeviceIndex resolveDevice(c10::DeviceIndex device) {
  return device < 0 ? currentDevice() : checkedDevice(device);
}

void markDeviceUsed(c10::DeviceIndex device) {
  if (device >= 0 && device < OPENREG_MAX_DEVICES) usedDevices[device].store(true);
}

bool deviceUsed(c10::DeviceIndex device) {
  return device >= 0 && device < OPENREG_MAX_DEVICES && usedDevices[device].load();
}

DeviceScope::DeviceScope(c10::DeviceIndex device) : previous_(currentDevice()) {
  if (device != previous_) setCurrentDevice(device);
}

DeviceScope::~DeviceScope() {
  int now = 0;
  if (orGetDevice(&now) == orSuccess && now != previous_) orSetDevice(previous_);
}

}  // namespace torch_openreg
