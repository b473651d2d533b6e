// functional_kernel.h — asynchronous native kernels built from ATen operations.
//
// A native kernel written as "outputs = f(inputs)" with ATen operations (the
// convolutions, the fused RNN cells) runs like the boxed fallback, through
// the same planner (plan.h): f runs on meta shadows of the inputs to learn the
// outputs' layouts, the first call of a signature runs synchronously to
// confirm them against the CPU, and later calls allocate the outputs on the
// device and enqueue f on CPU aliases, its results computed into (or copied
// to) those outputs.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "engine/tensor_function.h"

namespace torch_openreg {

// Undefined inputs are passed through as undefined; undefined results stay
// undefined.
std::vector<at::Tensor> launchFunctional(c10::DeviceIndex device, std::vector<at::Tensor> inputs,
                                         TensorFunction function,
                                         const FunctionSignature& signature);

}  // namespace torch_openreg
