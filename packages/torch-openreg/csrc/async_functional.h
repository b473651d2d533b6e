// async_functional.h — asynchronous native kernels built from ATen operations.
//
// A native kernel written as "outputs = f(inputs)" with ATen operations (the
// convolutions, the fused RNN cells) runs asynchronously like the fallback:
// f runs first on meta shadows of the inputs (caller's thread) to learn the
// outputs' layouts, the outputs are allocated on the device, and f runs again
// on CPU aliases on the stream, its results copied into those outputs.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace torch_openreg {

using TensorFunction = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// Undefined inputs are passed through as undefined; undefined results stay
// undefined. Falls back to synchronous execution if f has no meta form.
std::vector<at::Tensor> launchFunctional(c10::DeviceIndex device, std::vector<at::Tensor> inputs,
                                         TensorFunction function);

}  // namespace torch_openreg
