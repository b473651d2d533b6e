// kernel_launch.h — running operator code as work on an openreg stream.
//
// Every openreg kernel runs on the worker thread of the current stream of its
// device: that is where the runtime allows kernel-view addresses. The
// caller's thread-local PyTorch state (grad mode, dispatch-key exclusions,
// ...) travels with the work, CPU allocations inside it come from the device
// (KernelAllocationScope), and an exception thrown inside it is rethrown on
// the caller with its original type and message. The caller releases the
// GIL while it waits, because kernels may need it (Python-defined operators).
#pragma once

#include <c10/core/Device.h>

#include <functional>

namespace torch_openreg {

// Runs `body` on the current stream of `device` and waits for it.
void runOnDevice(c10::DeviceIndex device, const std::function<void()>& body);

// True on a thread that is currently running openreg kernel work.
bool insideKernel();

}  // namespace torch_openreg
