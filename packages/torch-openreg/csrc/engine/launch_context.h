// launch_context.h — where one operator call runs, resolved once.
//
// An operator call allocates its outputs, makes CPU aliases and enqueues its
// kernel, all for one device and that device's current stream. Resolving them
// once per call (the device validated and marked used, its current stream and
// the stream's runtime handle) and passing them down keeps every later step
// free of repeated lookups and checks.
#pragma once

#include <openreg.h>

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

namespace torch_openreg {

struct LaunchContext {
  c10::DeviceIndex device;
  c10::Stream stream;  // the device's current stream on this thread
  orStream_t handle;   // its runtime handle

  // Validates `device` (-1: the current device) and resolves its current stream.
  static LaunchContext forDevice(c10::DeviceIndex device);
};

}  // namespace torch_openreg
