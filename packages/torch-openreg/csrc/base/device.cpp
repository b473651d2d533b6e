// device.cpp — current device / count helpers over the runtime.
#include "base/device.h"

#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <string>

#include "base/runtime_check.h"

namespace torch_openreg {
namespace {

std::array<std::atomic<bool>, OPENREG_MAX_DEVICES> usedDevices{};

// The runtime reads the count once per process, so it is read once here too
// (every operator validates its device index against it). A failure is not
// cached: it raises, naming the bad environment, each time it is asked.
int countFromRuntime() {
  static std::atomic<int> cached{-1};
  int count = cached.load(std::memory_order_relaxed);
  if (count >= 0) return count;
  OPENREG_CHECK(orGetDeviceCount(&count));
  cached.store(count, std::memory_order_relaxed);
  return count;
}

}  // namespace

c10::DeviceIndex deviceCount() noexcept {
  try {
    return static_cast<c10::DeviceIndex>(countFromRuntime());
  } catch (const c10::Error&) {
    return 0;
  }
}

c10::DeviceIndex currentDevice() {
  int device = 0;
  OPENREG_CHECK(orGetDevice(&device));
  return static_cast<c10::DeviceIndex>(device);
}

void setCurrentDevice(c10::DeviceIndex device) {
  OPENREG_CHECK(orSetDevice(checkedDevice(device)));
}

c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) {
  const c10::DeviceIndex previous = currentDevice();
  if (device >= 0 && device != previous) setCurrentDevice(device);
  return previous;
}

c10::DeviceIndex checkedDevice(c10::DeviceIndex device) {
  const int count = countFromRuntime();
  if (C10_LIKELY(device >= 0 && device < count)) return device;
  const bool one = count == 1;
  TORCH_CHECK(false, "Invalid openreg device index ", static_cast<int>(device), ": there ",
              one ? "is " : "are ", count,
              one ? " openreg device (valid index 0)" : " openreg devices",
              one ? "" : " (valid indices 0..", one ? "" : std::to_string(count - 1),
              one ? "" : ")", "; set OPENREG_DEVICE_COUNT to change the count");
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
  if (succeeded(orGetDevice(&now)) && now != previous_) succeeded(orSetDevice(previous_));
}

}  // namespace torch_openreg
