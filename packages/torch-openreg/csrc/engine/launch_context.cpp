// launch_context.cpp — resolving a call's device and stream.
#include "engine/launch_context.h"

#include "base/device.h"
#include "engine/kernel_allocator.h"
#include "integration/stream.h"

namespace torch_openreg {

LaunchContext LaunchContext::forDevice(c10::DeviceIndex device) {
  device = resolveDevice(device);
  // Kernels allocate through c10's CPU allocator, which must be redirected to
  // the device before the first one runs (and not before: a process that
  // never launches one keeps the plain CPU allocator).
  installKernelAllocator();
  markDeviceUsed(device);
  const c10::Stream stream = currentStream(device);
  return LaunchContext{device, stream, nativeHandle(stream)};
}

}  // namespace torch_openreg
