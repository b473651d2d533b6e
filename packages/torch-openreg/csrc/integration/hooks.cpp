// hooks.cpp — PrivateUse1 hooks over the runtime.
#include "integration/hooks.h"

#include <c10/util/Exception.h>

#include "base/address_ranges.h"
#include "base/device.h"
#include "integration/generator.h"
#include "integration/host_allocator.h"
#include "integration/storage_resize.h"

namespace torch_openreg {

bool Hooks::isAvailable() const { return torch_openreg::deviceCount() > 0; }

bool Hooks::hasPrimaryContext(c10::DeviceIndex device) const { return deviceUsed(device); }

void Hooks::init() const {
  // The first device use raises for an invalid environment (device_count() only warned).
  checkDeviceEnvironment();
}

c10::DeviceIndex Hooks::deviceCount() const { return torch_openreg::deviceCount(); }

void Hooks::setCurrentDevice(c10::DeviceIndex device) const {
  torch_openreg::setCurrentDevice(device);
}

c10::DeviceIndex Hooks::getCurrentDevice() const { return currentDevice(); }

c10::DeviceIndex Hooks::exchangeDevice(c10::DeviceIndex device) const {
  return torch_openreg::exchangeDevice(device);
}

c10::DeviceIndex Hooks::maybeExchangeDevice(c10::DeviceIndex device) const {
  return exchangeDevice(device);
}

bool Hooks::isPinnedPtr(const void* data) const { return HostAllocator::isPinned(data); }

at::Allocator* Hooks::getPinnedMemoryAllocator() const { return &hostAllocator(); }

at::Device Hooks::getDeviceFromPtr(void* data) const {
  return openregDevice(deviceOfPointer(data));
}

const at::Generator& Hooks::getDefaultGenerator(c10::DeviceIndex device) const {
  return defaultGenerator(device);
}

at::Generator Hooks::getNewGenerator(c10::DeviceIndex device) const { return newGenerator(device); }

void Hooks::resizePrivateUse1Bytes(const c10::Storage& storage, size_t newSize) const {
  resizeStorageBytes(storage.unsafeGetStorageImpl(), newSize);
}

void registerHooks() {
  static Hooks* hooks = new Hooks();
  at::RegisterPrivateUse1HooksInterface(hooks);
}

}  // namespace torch_openreg
