// fallback.h — how every operator without a native openreg kernel runs.
//
// Default ("inplace"): the boxed fallback launches the operator's CPU kernel
// on the device's stream, with openreg tensors replaced by CPU aliases of
// their kernel view; outputs are allocated on the device by the kernel itself
// (kernel_allocator.h) and adopted as openreg tensors. Nothing is copied.
//
// OPENREG_FALLBACK=copy selects PyTorch's at::native::cpu_fallback instead
// (inputs copied to host, CPU kernel, outputs copied back): the strategy of
// PyTorch's reference OpenReg, kept for comparison and benchmarks.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>

namespace torch_openreg {

enum class FallbackMode { InPlace, Copy };

// Reads OPENREG_FALLBACK once ("inplace" or "copy"; anything else is an error).
FallbackMode fallbackMode();
std::string fallbackModeName();

void openregFallback(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack);

}  // namespace torch_openreg
