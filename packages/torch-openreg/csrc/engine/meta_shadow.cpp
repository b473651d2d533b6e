// meta_shadow.cpp — data-free stand-ins of openreg tensors.
#include "engine/meta_shadow.h"

#include <utility>

#include "engine/tensor_layout.h"

namespace torch_openreg {

c10::Storage MetaShadows::storageFor(const c10::Storage& original) {
  const c10::StorageImpl* key = original.unsafeGetStorageImpl();
  auto found = storages_.find(key);
  if (found != storages_.end()) return found->second;
  c10::Storage meta(c10::Storage::use_byte_size_t(), original.nbytes(),
                    c10::DataPtr(nullptr, c10::Device(c10::DeviceType::Meta)),
                    c10::GetAllocator(c10::DeviceType::Meta), /*resizable=*/true);
  storages_.emplace(key, meta);
  shadowStorages_.emplace(meta.unsafeGetStorageImpl(), true);
  return meta;
}

at::Tensor MetaShadows::shadow(const at::Tensor& tensor) {
  if (!tensor.defined()) return tensor;
  c10::Storage meta = storageFor(tensor.storage());
  return tensorOver(std::move(meta), c10::DispatchKey::Meta, tensor);
}

bool MetaShadows::aliasesShadow(const at::Tensor& result) const {
  return result.defined() && result.has_storage() &&
         shadowStorages_.count(result.storage().unsafeGetStorageImpl()) > 0;
}

}  // namespace torch_openreg
