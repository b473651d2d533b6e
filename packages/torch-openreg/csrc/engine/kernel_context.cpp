// kernel_context.cpp — alias creation and result adoption.
#include "engine/kernel_context.h"

#include <ATen/NestedTensorImpl.h>
#include <c10/util/Exception.h>

#include <cstring>

#include "base/device.h"
#include "integration/device_allocator.h"
#include "engine/kernel_allocator.h"
#include "base/runtime_check.h"

namespace torch_openreg {
namespace {

bool isOpenReg(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().type() == c10::DeviceType::PrivateUse1;
}

void* kernelPointerOf(const void* devicePointer) {
  if (devicePointer == nullptr) return nullptr;
  void* kernelPointer = nullptr;
  OPENREG_CHECK(orGetKernelPointer(&kernelPointer, devicePointer));
  return kernelPointer;
}

// A tensor of `keys` over `storage` with the layout and flags of `layout`.
at::Tensor makeTensor(c10::Storage storage, c10::DispatchKey key, const at::Tensor& layout) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key),
                                                   layout.dtype());
  impl->set_sizes_and_strides(layout.sizes(), layout.strides(), layout.storage_offset());
  impl->_set_conj(layout.is_conj());
  impl->_set_neg(layout.is_neg());
  return at::Tensor(std::move(impl));
}

// A nested tensor over `storage` with the nested layout of `layout`.
at::Tensor makeNested(c10::Storage storage, c10::DispatchKey backend, const at::Tensor& layout) {
  const auto* nested = at::native::get_nested_tensor_impl(layout);
  const int64_t elements = static_cast<int64_t>(storage.nbytes() / layout.itemsize());
  auto buffer = c10::make_intrusive<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(backend),
                                                     layout.dtype());
  buffer->set_sizes_contiguous({elements});
  return at::detail::make_tensor<at::native::NestedTensorImpl>(
      at::Tensor(std::move(buffer)), nested->get_nested_sizes(), nested->get_nested_strides(),
      nested->get_storage_offsets());
}

at::Tensor makeLike(c10::Storage storage, c10::DispatchKey backend, const at::Tensor& layout) {
  if (layout.is_nested()) return makeNested(std::move(storage), backend, layout);
  return makeTensor(std::move(storage), backend, layout);
}

}  // namespace

KernelContext::AliasedStorage& KernelContext::aliasStorage(const c10::Storage& original) {
  if (AliasedStorage* found = byOriginal_.find(original.unsafeGetStorageImpl())) return *found;
  void* kernelData = kernelPointerOf(original.data());
  // Resizable with the kernel allocator: a kernel that resizes an out=
  // argument gets new device memory, which writeBack() hands to the original.
  c10::Storage alias(c10::Storage::use_byte_size_t(), original.nbytes(),
                     c10::DataPtr(kernelData, c10::Device(c10::DeviceType::CPU)), kernelAllocator(),
                     /*resizable=*/true);
  originalOfAlias_.insert(alias.unsafeGetStorageImpl(), original.unsafeGetStorageImpl());
  return byOriginal_.insert(original.unsafeGetStorageImpl(),
                            AliasedStorage{original, std::move(alias), kernelData});
}

at::Tensor KernelContext::alias(const at::Tensor& tensor) {
  if (!isOpenReg(tensor)) return tensor;
  TORCH_CHECK(tensor.layout() == c10::kStrided || tensor.is_nested(),
              "openreg supports strided and nested tensors only, got ", tensor.layout());
  if (at::Tensor* cached = aliasOfTensor_.find(tensor.unsafeGetTensorImpl())) return *cached;
  at::Tensor created = makeLike(aliasStorage(tensor.storage()).alias, c10::DispatchKey::CPU, tensor);
  return aliasOfTensor_.insert(tensor.unsafeGetTensorImpl(), std::move(created));
}

at::Tensor KernelContext::viewOf(const c10::Storage& storage, const at::Tensor& layout) {
  return makeLike(storage, c10::DispatchKey::PrivateUse1, layout);
}

c10::Storage KernelContext::adoptStorage(const c10::Storage& cpuStorage) {
  const c10::StorageImpl* key = cpuStorage.unsafeGetStorageImpl();
  if (c10::Storage* done = adopted_.find(key)) return *done;

  const c10::Device device = openregDevice(device_);
  c10::DataPtr& cpuData = cpuStorage.unsafeGetStorageImpl()->mutable_data_ptr();
  c10::DataPtr deviceData;
  if (cpuData.get() == nullptr) {
    deviceData = c10::DataPtr(nullptr, device);
  } else if (isKernelAllocation(cpuData)) {
    // Allocated on the device during the kernel: take ownership, relabel.
    deviceData = relabelAsDevice(cpuData);
  } else {
    // Host memory (e.g. allocated on a helper thread): copy it to the device.
    deviceData = deviceAllocator().allocateOn(device_, cpuStorage.nbytes());
    std::memcpy(kernelPointerOf(deviceData.get()), cpuData.get(), cpuStorage.nbytes());
  }
  c10::Storage adopted(c10::Storage::use_byte_size_t(), cpuStorage.nbytes(), std::move(deviceData),
                       &deviceAllocator(), /*resizable=*/true);
  return adopted_.insert(key, std::move(adopted));
}

at::Tensor KernelContext::adopt(const at::Tensor& result) {
  if (!result.defined() || result.device().type() != c10::DeviceType::CPU) return result;
  TORCH_CHECK(result.layout() == c10::kStrided || result.is_nested(),
              "openreg supports strided (and nested) tensors only; this operation produced a ",
              result.layout(), " tensor. Run it on the CPU instead (tensor.cpu()).");
  const c10::StorageImpl* storage = result.storage().unsafeGetStorageImpl();
  if (const c10::StorageImpl** original = originalOfAlias_.find(storage)) {
    return viewOf(byOriginal_.find(*original)->original, result);
  }
  return viewOf(adoptStorage(result.storage()), result);
}

void KernelContext::writeBack(const at::Tensor& original) {
  if (!isOpenReg(original) || original.is_nested()) return;
  const at::Tensor* cached = aliasOfTensor_.find(original.unsafeGetTensorImpl());
  if (cached == nullptr) return;
  const at::Tensor changed = *cached;
  AliasedStorage& storages = aliasStorage(original.storage());
  c10::StorageImpl* aliasStorageImpl = changed.storage().unsafeGetStorageImpl();
  TORCH_CHECK(aliasStorageImpl == storages.alias.unsafeGetStorageImpl(),
              "openreg: an in-place kernel replaced the storage of its argument; register a native "
              "openreg kernel for this operator");
  if (aliasStorageImpl->data() != storages.kernelData) {
    // The kernel resized the argument: move its new memory to the original.
    c10::Storage fresh = adoptStorage(changed.storage());
    original.storage().unsafeGetStorageImpl()->set_data_ptr_noswap(
        std::move(fresh.unsafeGetStorageImpl()->mutable_data_ptr()));
    original.storage().unsafeGetStorageImpl()->set_nbytes(fresh.nbytes());
    storages.kernelData = aliasStorageImpl->mutable_data();
  }
  if (changed.sizes() != original.sizes() || changed.strides() != original.strides() ||
      changed.storage_offset() != original.storage_offset()) {
    original.unsafeGetTensorImpl()->set_sizes_and_strides(changed.sizes(), changed.strides(),
                                                          changed.storage_offset());
  }
}

}  // namespace torch_openreg

