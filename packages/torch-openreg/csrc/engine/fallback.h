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

void openregFallback(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                     torch::jit::Stack* stack);

// Some operators have a CPU kernel and also a generic math decomposition
// (CompositeExplicitAutograd, e.g. native_layer_norm), which PyTorch would
// pick for a backend without its own kernel; openreg runs the CPU kernel
// instead, so results match the CPU's exactly. The generic kernels of
// structured operators (allocate outputs with the C++ meta function, then
// call the out= form) are replaced for unary and binary operators only —
// one dispatch instead of two — and kept for the others, whose device
// checks (which host tensors may mix in) are operator-specific.
// Likewise every operator with a sparse CPU kernel is registered for the
// sparse openreg keys, where a generic kernel would otherwise win over the
// sparse fallback.
// Returns the number of operators registered (called once, from _init).
size_t preferCpuKernels();

}  // namespace torch_openreg
