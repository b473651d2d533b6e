// meta_shadow.cpp — meta stand-ins and device allocation from meta layouts.
#include "engine/meta_shadow.h"

#include <ATen/EmptyTensor.h>

#include "base/device.h"
#include "integration/device_allocator.h"

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
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      storageFor(tensor.storage()), c10::DispatchKeySet(c10::DispatchKey::Meta), tensor.dtype());
  impl->set_sizes_and_strides(tensor.sizes(), tensor.strides(), tensor.storage_offset());
  impl->_set_conj(tensor.is_conj());
  impl->_set_neg(tensor.is_neg());
  return at::Tensor(std::move(impl));
}

bool MetaShadows::aliasesShadow(const at::Tensor& result) const {
  return result.defined() && result.has_storage() &&
         shadowStorages_.count(result.storage().unsafeGetStorageImpl()) > 0;
}

at::Tensor allocateLike(const at::Tensor& layout, c10::DeviceIndex device) {
  DeviceScope scope(device);
  return at::detail::empty_strided_generic(layout.sizes(), layout.strides(), &deviceAllocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           layout.scalar_type());
}

}  // namespace torch_openreg
