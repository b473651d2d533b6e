// shallow_copy.cpp — _has_compatible_shallow_copy_type: openreg tensors may
// take the place of CPU tensors' data, and the reverse.
//
// `param.data = other` (and nn.Module._apply, which keeps Parameter objects,
// weight ties and optimizers across `.to()` only when this is true) swaps a
// TensorImpl's contents in place. c10's TensorImpl allows it among the dense
// backends it lists (CPU, CUDA, ...), not PrivateUse1, and asks custom devices
// to override this operator. openreg tensors are plain TensorImpls (sparse:
// SparseTensorImpl) like the CPU's, so the swap is safe between them: openreg
// joins the list for dense and for sparse COO tensors, as CUDA is in it.
// Compressed sparse layouts are already compatible with each other in c10.
#include <ATen/core/Tensor.h>
#include <torch/library.h>

namespace torch_openreg {
namespace {

constexpr c10::DispatchKeySet kSwappableBackends({
    c10::BackendComponent::CPUBit,
    c10::BackendComponent::CUDABit,
    c10::BackendComponent::MPSBit,
    c10::BackendComponent::HIPBit,
    c10::BackendComponent::XPUBit,
    c10::BackendComponent::HPUBit,
    c10::BackendComponent::MTIABit,
    c10::BackendComponent::PrivateUse1Bit,
});

// A tensor of `functionality` (Dense or Sparse) on one of the backends above.
bool isSwappable(c10::DispatchKeySet keys, c10::DispatchKey functionality) {
  return keys.has_any(c10::DispatchKeySet(functionality)) && keys.has_any(kSwappableBackends);
}

bool hasCompatibleShallowCopyType(const at::Tensor& self, const at::Tensor& from) {
  if (self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set())) return true;
  const c10::DispatchKeySet mine = self.key_set(), theirs = from.key_set();
  // Nested tensors have Dense keys too, but another TensorImpl type.
  if (self.is_nested() || from.is_nested()) return false;
  return (isSwappable(mine, c10::DispatchKey::Dense) &&
          isSwappable(theirs, c10::DispatchKey::Dense)) ||
         (isSwappable(mine, c10::DispatchKey::Sparse) &&
          isSwappable(theirs, c10::DispatchKey::Sparse));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(hasCompatibleShallowCopyType));
}

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(hasCompatibleShallowCopyType));
}

}  // namespace
}  // namespace torch_openreg
