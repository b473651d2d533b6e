// kernel_launch.h — running operator code as work on an openreg stream.
//
// Every openreg kernel runs on the worker thread of the current stream of its
// device: that is where the runtime allows kernel-view addresses. Work is
// asynchronous, as on CUDA: launchOnDevice() enqueues and returns at once, and
// the work owns everything it uses (tensors captured by value stay alive, and
// their memory allocated, until it has run). Work runs below autograd with
// gradients off (it is an operator already dispatched; the caller's modes do
// not apply to what it calls internally), and CPU allocations inside it come
// from the device (KernelAllocationScope).
//
// A failure inside asynchronous work is reported by the next synchronizing
// call (stream/event/device synchronize, .cpu(), .item(), ...) with the
// original message. runOnDevice() is the synchronous form for work whose
// result the caller needs: it waits, and rethrows with the original type.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <functional>

#include "engine/launch_context.h"

namespace torch_openreg {

// Enqueues `body` on the context's stream; returns immediately.
void launchOnDevice(const LaunchContext& context, std::function<void()> body);
// The same on the current stream of `device`.
void launchOnDevice(c10::DeviceIndex device, std::function<void()> body);

// Runs `body` on the context's stream after all work queued there, waits for
// it, and rethrows its exception (if any) on the caller.
void runOnDevice(const LaunchContext& context, const std::function<void()>& body);
// The same on the current stream of `device`.
void runOnDevice(c10::DeviceIndex device, const std::function<void()>& body);

// OPENREG_LAUNCH_BLOCKING=1 (read once, validated): every launch waits for
// its work and rethrows its error, like CUDA_LAUNCH_BLOCKING=1.
bool launchBlocking();

// Later work on `waiter` starts only after work queued so far on `producer`.
void streamWaitsFor(const c10::Stream& waiter, const c10::Stream& producer);

}  // namespace torch_openreg
