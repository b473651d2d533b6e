// tensor_function.h — a native kernel written as "outputs = f(inputs)".
//
// The convolutions and fused RNN cells (kernels/) are functions of tensors
// built from ATen operations; the engine plans, runs and launches them like
// any operator (functional_kernel.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace torch_openreg {

using TensorFunction = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// What identifies f apart from its tensor inputs: a name (a string literal:
// its address is the identity) and every other value its result layouts
// depend on (strides, paddings, flags, ...).
struct FunctionSignature {
  const char* name;
  std::vector<int64_t> parameters;
};

}  // namespace torch_openreg
