// profiler.h — PyTorch's profiler on openreg: Kineto device activities and
// the legacy (use_device) event stubs.
//
// Two integration points of torch 2.15, both registered when _C loads:
//  - Kineto: an IActivityProfiler registered with PyTorch's PrivateUse1
//    profiler registry. Its sessions switch on the engine's recorder
//    (base/device_activity.h) and turn each record into a Kineto activity:
//    kernels and copies on a device lane per stream, the host's launch as a
//    runtime event on the launching thread, a flow arrow from one to the
//    other, and both linked to the operator that launched them — which is
//    how key_averages() attributes device time to operators.
//  - Legacy: ProfilerStubs (registerPrivateUse1Methods) for
//    torch.autograd.profiler.profile(use_device="openreg") without Kineto:
//    runtime events with timing recorded on the current stream around each
//    operator, as CUDA's legacy path does.
#pragma once

namespace torch_openreg {

// True once both profiler integrations are registered (they register at
// static initialisation; Python asks to report it).
bool profilerRegistered();

}  // namespace torch_openreg
