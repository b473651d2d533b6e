// meta_shadow.h — data-free stand-ins of openreg tensors, for shape inference.
//
// Asynchronous execution needs an operator's outputs (sizes, strides, dtype)
// before its kernel has run. Running the operator on "meta" shadows — same
// metadata, no data — with PyTorch's meta kernels answers that on the
// caller's thread, with the same stride rules the CPU kernel will follow.
// Shadows of tensors that share an openreg storage share one meta storage,
// so aliasing between arguments and results is visible.
#pragma once

#include <ATen/core/Tensor.h>

#include <unordered_map>

namespace torch_openreg {

class MetaShadows {
 public:
  // Meta shadow of an openreg or CPU tensor (undefined stays undefined).
  at::Tensor shadow(const at::Tensor& tensor);
  // True if `result` (a meta tensor) shares storage with a shadowed tensor.
  bool aliasesShadow(const at::Tensor& result) const;

 private:
  c10::Storage storageFor(const c10::Storage& original);

  std::unordered_map<const c10::StorageImpl*, c10::Storage> storages_;
  std::unordered_map<const c10::StorageImpl*, bool> shadowStorages_;
};

}  // namespace torch_openreg
