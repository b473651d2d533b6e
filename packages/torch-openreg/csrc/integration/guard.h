// guard.h — c10::impl::DeviceGuardImplInterface for the openreg device.
//
// The guard is how device-generic PyTorch code (DeviceGuard, StreamGuard,
// torch.Stream, torch.Event, torch.accelerator) talks to a backend: current
// device, streams, events and synchronisation. Registered with
// C10_REGISTER_GUARD_IMPL(PrivateUse1, ...).
#pragma once

#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace torch_openreg {

struct GuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

  c10::DeviceType type() const override { return kType; }
  c10::Device exchangeDevice(c10::Device device) const override;
  c10::Device getDevice() const override;
  void setDevice(c10::Device device) const override;
  void uncheckedSetDevice(c10::Device device) const noexcept override;
  c10::DeviceIndex deviceCount() const noexcept override;
  c10::DeviceCapability getDeviceCapability(c10::Device device) const override;

  c10::Stream getStream(c10::Device device) const override;
  c10::Stream getDefaultStream(c10::Device device) const override;
  c10::Stream getStreamFromGlobalPool(c10::Device device,
                                      bool isHighPriority = false) const override;
  c10::Stream getNewStream(c10::Device device, int priority = 0) const override;
  c10::Stream exchangeStream(c10::Stream stream) const override;
  void* getStreamNativeHandle(const c10::Stream stream) const override;
  bool queryStream(const c10::Stream& stream) const override;
  void synchronizeStream(const c10::Stream& stream) const override;
  void synchronizeDevice(const c10::DeviceIndex deviceIndex) const override;

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex deviceIndex,
              const c10::EventFlag flag) const override;
  void block(void* event, const c10::Stream& stream) const override;
  bool queryEvent(void* event) const override;
  void synchronizeEvent(void* event) const override;
  double elapsedTime(void* start, void* end, const c10::DeviceIndex deviceIndex) const override;
  void destroyEvent(void* event, const c10::DeviceIndex deviceIndex) const noexcept override;

  void recordDataPtrOnStream(const c10::DataPtr& dataPtr, const c10::Stream& stream) const override;
};

}  // namespace torch_openreg
