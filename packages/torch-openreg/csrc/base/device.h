// device.h — the current device and device count, as PyTorch types.
//
// The runtime keeps the current device per host thread; these helpers are
// what the guard, the hooks and the Python module share.
#pragma once

#include <c10/core/Device.h>

namespace torch_openreg {

c10::DeviceIndex deviceCount() noexcept;  // 0 if the runtime is unusable
c10::DeviceIndex currentDevice();
void setCurrentDevice(c10::DeviceIndex device);
// Makes `device` current (unless it is -1 or already current); returns the
// device that was current before.
c10::DeviceIndex exchangeDevice(c10::DeviceIndex device);
// Validates `device` (TORCH_CHECK with a clear message) and returns it.
c10::DeviceIndex checkedDevice(c10::DeviceIndex device);
// The device index, with -1 (no index) meaning the current device.
c10::DeviceIndex resolveDevice(c10::DeviceIndex device);

inline c10::Device openregDevice(c10::DeviceIndex index) {
  return c10::Device(c10::DeviceType::PrivateUse1, index);
}

// Devices that have been used (allocation, stream, kernel): PyTorch's notion
// of a "primary context".
void markDeviceUsed(c10::DeviceIndex device);
bool deviceUsed(c10::DeviceIndex device);

// Makes `device` current on this thread for the scope, if it is not already.
class DeviceScope {
 public:
  explicit DeviceScope(c10::DeviceIndex device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  c10::DeviceIndex previous_;
};

}  // namespace torch_openreg
