// kernel_launch.h — the one path from the host to an openreg stream.
//
// Every openreg kernel runs on the worker thread of the current stream of its
// device: that is where the runtime allows kernel-view addresses. Work is
// asynchronous, as on CUDA: launchOnDevice() enqueues and returns at once.
// Work does not own the device memory it uses (stream order protects it, see
// block_pool.h); it runs below autograd with gradients off (it is an
// operator already dispatched; the caller's modes do not apply to what it
// calls internally), and CPU allocations inside it come from the device
// (KernelAllocationScope).
//
// Each launch is described by a LaunchSpec (launch_spec.h), and this path
// does what every launch needs from it: the sync debug mode's check, the race
// detector's check of the tensors it touches (and telling the detector when
// the work has run), and the profiler's record.
//
// A failure inside asynchronous work is reported by the next synchronizing
// call (stream/event/device synchronize, .cpu(), .item(), ...) with the
// original message. runOnDevice() is the synchronous form for work whose
// result the caller needs: it waits, and rethrows with the original type.
#pragma once

#include <openreg.h>

#include <c10/core/Stream.h>

#include <functional>

#include "engine/launch_spec.h"

namespace torch_openreg {

// Enqueues `body` on the spec's stream; returns immediately.
void launchOnDevice(const LaunchSpec& spec, std::function<void()> body);

// Runs `body` on the spec's stream after all work queued there, waits for
// it, and rethrows its exception (if any) on the caller.
void runOnDevice(const LaunchSpec& spec, const std::function<void()>& body);

// A byte copy the runtime makes itself (orMemcpyAsync) on the spec's stream,
// with the checks and the record every launch gets; `afterCopy` (if any) runs
// on the worker once the copy has, and is destroyed there (what the copy's
// memory needs to stay alive for). Returns once the copy is done when the
// spec says the host waits (or OPENREG_LAUNCH_BLOCKING=1), or when the runtime
// makes it synchronous (pageable host memory), as orMemcpyAsync does.
void copyOnStream(const LaunchSpec& spec, void* destination, const void* source, size_t bytes,
                  orMemcpyKind kind, std::function<void()> afterCopy = nullptr);

// The tensors a synchronous launch wrote that were only known once it ran
// (its new results), for the race detector.
void recordLaunchResults(const LaunchSpec& spec, c10::ArrayRef<at::Tensor> results);

// OPENREG_LAUNCH_BLOCKING=1 (read once, validated): every launch waits for
// its work and rethrows its error, like CUDA_LAUNCH_BLOCKING=1.
bool launchBlocking();

// Later work on `waiter` starts only after work queued so far on `producer`.
void streamWaitsFor(const c10::Stream& waiter, const c10::Stream& producer);

}  // namespace torch_openreg
