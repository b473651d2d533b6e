// address_ranges.cpp — per-device ranges, loaded once per device.
#include "base/address_ranges.h"

#include <openreg.h>

#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>

#include "base/runtime_check.h"

namespace torch_openreg {
namespace {

struct Range {
  uintptr_t deviceBase = 0;
  uintptr_t kernelBase = 0;
  size_t size = 0;
};

// Written once per device (before `known` is published), read lock-free.
std::array<Range, OPENREG_MAX_DEVICES> ranges{};
std::array<std::atomic<bool>, OPENREG_MAX_DEVICES> known{};

const Range& rangeOf(c10::DeviceIndex device) {
  TORCH_CHECK(device >= 0 && device < OPENREG_MAX_DEVICES, "invalid openreg device index ",
              static_cast<int>(device));
  if (known[device].load(std::memory_order_acquire)) return ranges[device];
  static std::mutex loading;
  std::lock_guard<std::mutex> lock(loading);
  if (!known[device].load(std::memory_order_relaxed)) {
    orDeviceAddressRange range{};
    OPENREG_CHECK(orDeviceGetAddressRange(&range, device));
    ranges[device] = Range{reinterpret_cast<uintptr_t>(range.deviceBase),
                           reinterpret_cast<uintptr_t>(range.kernelBase), range.size};
    known[device].store(true, std::memory_order_release);
  }
  return ranges[device];
}

bool inside(uintptr_t address, uintptr_t base, size_t size) {
  return address >= base && address - base < size;
}

}  // namespace

void* toKernelView(const void* devicePointer, c10::DeviceIndex device) {
  const Range& range = rangeOf(device);
  const auto address = reinterpret_cast<uintptr_t>(devicePointer);
  TORCH_CHECK(inside(address, range.deviceBase, range.size), "openreg: the data at ", devicePointer,
              " is not in the memory of openreg:", static_cast<int>(device),
              "; an openreg tensor must own memory allocated on its device (use torch.empty(..., "
              "device=\"openreg\") or .to(\"openreg\") instead of wrapping foreign memory)");
  return reinterpret_cast<void*>(address - range.deviceBase + range.kernelBase);
}

void* toDeviceView(const void* kernelPointer) {
  const auto address = reinterpret_cast<uintptr_t>(kernelPointer);
  for (size_t device = 0; device < ranges.size(); ++device) {
    if (!known[device].load(std::memory_order_acquire)) continue;
    const Range& range = ranges[device];
    if (inside(address, range.kernelBase, range.size)) {
      return reinterpret_cast<void*>(address - range.kernelBase + range.deviceBase);
    }
  }
  TORCH_CHECK(false, "openreg: ", kernelPointer, " is not a kernel-view address of openreg memory");
}

c10::DeviceIndex deviceOfPointer(const void* devicePointer) {
  orPointerAttributes attributes{};
  OPENREG_CHECK(orPointerGetAttributes(&attributes, devicePointer));
  TORCH_CHECK(attributes.type == orMemoryTypeDevice, "openreg: ", devicePointer,
              " is not openreg device memory");
  return static_cast<c10::DeviceIndex>(attributes.device);
}

bool isKernelViewAddress(const void* pointer) noexcept {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  for (size_t device = 0; device < ranges.size(); ++device) {
    if (known[device].load(std::memory_order_acquire) &&
        inside(address, ranges[device].kernelBase, ranges[device].size)) {
      return true;
    }
  }
  return false;
}

}  // namespace torch_openreg
