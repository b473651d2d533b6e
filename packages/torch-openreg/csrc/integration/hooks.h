// hooks.h — at::PrivateUse1HooksInterface: what ATen asks a backend directly.
//
// Availability, device count/current device, pinned memory, the device of a
// pointer, default/new generators, "primary context" (has a device been used),
// and resizing of storage bytes. Registered when _C is imported.
#pragma once

#include <ATen/detail/PrivateUse1HooksInterface.h>

namespace torch_openreg {

struct Hooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override;
  bool hasPrimaryContext(c10::DeviceIndex device) const override;
  void init() const override;
  c10::DeviceIndex deviceCount() const override;
  void setCurrentDevice(c10::DeviceIndex device) const override;
  c10::DeviceIndex getCurrentDevice() const override;
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override;
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override;
  bool isPinnedPtr(const void* data) const override;
  at::Allocator* getPinnedMemoryAllocator() const override;
  at::Device getDeviceFromPtr(void* data) const override;
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override;
  at::Generator getNewGenerator(c10::DeviceIndex device) const override;
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newSize) const override;
};

void registerHooks();

}  // namespace torch_openreg
