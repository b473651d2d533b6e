// device.h — the current device and device count, as PyTorch types.
//
// The runtime keeps the current device per host thread; these helpers are
// what the guard, the hooks and the Python module share.
#pragma once

#include <openreg.h>

#include <c10/core/Device.h>

namespace torch_openreg {

// 0 if the devices cannot be used (an invalid OPENREG_DEVICE_COUNT, say); the
// first time, that also warns, naming the problem (like torch.cuda with a broken
// driver), so a typo does not pass for "no device".
c10::DeviceIndex deviceCount() noexcept;
// Raises, naming the variable, the value and the fix, if the environment the
// devices are made from is invalid: the runtime's variables (OPENREG_DEVICE_COUNT,
// OPENREG_DEVICE_MEMORY, OPENREG_FAULT_*) and this binding's own minimum device
// memory. Never activates a device.
void checkDeviceEnvironment();
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

// An event (timing disabled) marking the work queued on `stream` so far, or
// null if the runtime could not record one: for callers that then fall back
// to checking the stream's idleness instead of raising.
orEvent_t recordEventOrNull(orStream_t stream);

}  // namespace torch_openreg
