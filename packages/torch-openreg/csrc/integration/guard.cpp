// guard.cpp — device/stream/event operations for device-generic PyTorch code.
#include "integration/guard.h"

#include <c10/util/Exception.h>

#include "base/debug_modes.h"
#include "base/device.h"
#include "base/runtime_check.h"
#include "base/stream_capture.h"
#include "integration/device_allocator.h"
#include "integration/event.h"
#include "integration/stream.h"

namespace torch_openreg {
namespace {
void checkType(const c10::Device& device) {
  TORCH_CHECK(device.type() == GuardImpl::kType, "expected an openreg device, got ", device);
}
}  // namespace

c10::Device GuardImpl::exchangeDevice(c10::Device device) const {
  checkType(device);
  return openregDevice(torch_openreg::exchangeDevice(device.index()));
}

c10::Device GuardImpl::getDevice() const { return openregDevice(currentDevice()); }

void GuardImpl::setDevice(c10::Device device) const {
  checkType(device);
  setCurrentDevice(device.index());
}

void GuardImpl::uncheckedSetDevice(c10::Device device) const noexcept {
  succeeded(orSetDevice(device.index()));
}

c10::DeviceIndex GuardImpl::deviceCount() const noexcept { return torch_openreg::deviceCount(); }

// The dtypes the CPU's conversion kernels handle (bit positions in
// c10::DeviceCapability follow ScalarType's values).
// clang-format off
constexpr c10::ScalarType kConvertibleTypes[] = {
    c10::kByte, c10::kChar, c10::kShort, c10::kInt, c10::kLong,
    c10::kUInt16, c10::kUInt32, c10::kUInt64, c10::kBool,
    c10::kHalf, c10::kFloat, c10::kDouble, c10::kBFloat16,
    c10::kComplexHalf, c10::kComplexFloat, c10::kComplexDouble, c10::kBComplex32,
    c10::kFloat8_e5m2, c10::kFloat8_e4m3fn, c10::kFloat8_e5m2fnuz, c10::kFloat8_e4m3fnuz,
    c10::kFloat8_e8m0fnu};
// clang-format on

c10::DeviceCapability GuardImpl::getDeviceCapability(c10::Device device) const {
  checkType(device);
  resolveDevice(device.index());
  // The dtypes whose tensors can be allocated and converted to and from each
  // other (the contract of torch.accelerator.get_device_capability). Kernels
  // are the CPU's, so these are the dtypes the CPU converts; not the
  // quantized types (no openreg tensors), nor the bit and sub-byte types and
  // float4_e2m1fn_x2, which even the CPU cannot convert.
  c10::DeviceCapability capability;
  capability.capability_data.capability_bits = 0;
  for (const c10::ScalarType type : kConvertibleTypes) {
    capability.capability_data.capability_bits |= uint64_t{1} << static_cast<int>(type);
  }
  return capability;
}

c10::Stream GuardImpl::getStream(c10::Device device) const { return currentStream(device.index()); }

c10::Stream GuardImpl::getDefaultStream(c10::Device device) const {
  return defaultStream(device.index());
}

c10::Stream GuardImpl::getStreamFromGlobalPool(c10::Device device, bool isHighPriority) const {
  const PriorityRange range = priorityRange();
  return streamFromPool(device.index(), isHighPriority ? range.greatest : range.least);
}

c10::Stream GuardImpl::getNewStream(c10::Device device, int priority) const {
  return streamFromPool(device.index(), priority);
}

c10::Stream GuardImpl::exchangeStream(c10::Stream stream) const {
  return torch_openreg::exchangeStream(stream);
}

void* GuardImpl::getStreamNativeHandle(const c10::Stream stream) const {
  return nativeHandle(stream);
}

bool GuardImpl::queryStream(const c10::Stream& stream) const {
  return torch_openreg::queryStream(stream);
}

void GuardImpl::synchronizeStream(const c10::Stream& stream) const {
  torch_openreg::synchronizeStream(stream);
}

void GuardImpl::synchronizeDevice(const c10::DeviceIndex deviceIndex) const {
  const c10::DeviceIndex device = resolveDevice(deviceIndex);
  checkDeviceWait(device, "synchronizing the device (torch.accelerator.synchronize())");
  DeviceScope scope(device);
  OPENREG_CHECK(orDeviceSynchronize());
  notifyStreamOrder(&StreamOrderObserver::deviceSynchronized, device);
}

void GuardImpl::record(void** event, const c10::Stream& stream, const c10::DeviceIndex deviceIndex,
                       const c10::EventFlag flag) const {
  TORCH_CHECK(deviceIndex == -1 || deviceIndex == stream.device_index(), "Event device index ",
              static_cast<int>(deviceIndex), " does not match recording stream's device index ",
              static_cast<int>(stream.device_index()), ".");
  recordEvent(event, stream, flag);
}

void GuardImpl::block(void* event, const c10::Stream& stream) const { blockStream(event, stream); }

bool GuardImpl::queryEvent(void* event) const { return torch_openreg::queryEvent(event); }

void GuardImpl::synchronizeEvent(void* event) const { torch_openreg::synchronizeEvent(event); }

double GuardImpl::elapsedTime(void* start, void* end,
                              const c10::DeviceIndex /*deviceIndex*/) const {
  return elapsedMilliseconds(start, end);
}

void GuardImpl::destroyEvent(void* event, const c10::DeviceIndex /*deviceIndex*/) const noexcept {
  torch_openreg::destroyEvent(event);
}

void GuardImpl::recordDataPtrOnStream(const c10::DataPtr& dataPtr,
                                      const c10::Stream& stream) const {
  deviceAllocator().recordStream(dataPtr, stream);
}

C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

}  // namespace torch_openreg
