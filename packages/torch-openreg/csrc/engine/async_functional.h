// async_functional.h — asynchronous native kernels built from ATen operations.
//
// A native kernel written as "outputs = f(inputs)" with ATen operations (the
// convolutions, the fused RNN cells) runs asynchronously like the fallback:
// f runs first on meta shadows of the inputs (caller's thread) to learn the
// outputs' layouts, the outputs are allocated on the device, and f runs again
// on CPU aliases on the stream, its results copied into those outputs. The
// layouts are cached by f's name, its non-tensor parameters and the inputs'
// metadata, since meta kernels can cost more than the kernel itself.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace torch_openreg {

using TensorFunction = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// What identifies f apart from its tensor inputs: a name, and every other
// value its result layouts depend on (strides, paddings, flags, ...).
struct FunctionSignature {
  const char* name;
  std::vector<int64_t> parameters;
};

// Undefined inputs are passed through as undefined; undefined results stay
// undefined. Falls back to synchronous execution if f has no meta form.
std::vector<at::Tensor> launchFunctional(c10::DeviceIndex device, std::vector<at::Tensor> inputs,
                                         TensorFunction function, const FunctionSignature& signature);

}  // namespace torch_openreg
