// zero_tensor.cpp — _efficientzerotensor: zeros that are never allocated.
//
// Autograd uses "efficient zero tensors" for gradients known to be zero
// (torch.func.hessian, jvp of grad, forward-mode dual tensors): a tensor with
// sizes and a dtype but no memory, carrying the ZeroTensor dispatch key. That
// key's handlers (c10's ZeroTensor fallback and kernels like mul/add) treat
// it as zeros and materialise it, with at::zeros on its device, only for
// operators that need real data — so this kernel's tensor never reaches the
// stream. Built exactly as the CPU and CUDA kernels build theirs: a null data
// pointer from ZeroTensorAllocator, the backend key plus ZeroTensor.
#include <ATen/EmptyTensor.h>
#include <ATen/native/TensorFactories.h>
#include <c10/core/ScalarTypeToTypeMeta.h>
#include <torch/library.h>

#include "base/device.h"

namespace torch_openreg {
namespace {

at::Tensor efficientZeroTensor(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<c10::Layout> /*layout*/,
                               std::optional<c10::Device> device,
                               std::optional<bool> /*pinMemory*/) {
  const c10::DeviceIndex index = resolveDevice(device ? device->index() : -1);
  at::native::ZeroTensorAllocator allocator(openregDevice(index));
  const c10::DispatchKeySet keys = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1) |
                                   c10::DispatchKeySet(c10::DispatchKey::ZeroTensor);
  return at::detail::empty_generic(size, &allocator, keys, c10::dtype_or_default(dtype),
                                   std::nullopt);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_efficientzerotensor", TORCH_FN(efficientZeroTensor));
}

}  // namespace
}  // namespace torch_openreg
