// kernel_context.cpp — alias creation and result adoption.
#include "kernel_context.h"

#include <c10/util/Exception.h>

#include <cstring>

#include "device.h"
#include "device_allocator.h"
#include "kernel_allocator.h"
#include "runtime_check.h"

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

void* devicePointerOf(const void* kernelPointer) {
  if (kernelPointer == nullptr) return nullptr;
  void* devicePointer = nullptr;
  OPENREG_CHECK(orGetDevicePointer(&devicePointer, kernelPointer));
  return devicePointer;
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

}  // namespace

KernelContext::AliasedStorage& KernelContext::aliasStorage(const c10::Storage& original) {
  auto found = byOriginal_.find(original.unsafeGetStorageImpl());
  if (found != byOriginal_.end()) return found->second;
  void* kernelData = kernelPointerOf(original.data());
  // Resizable with the kernel allocator: a kernel that resizes an out=
  // argument gets new device memory, which writeBack() hands to the original.
  c10::Storage alias(c10::Storage::use_byte_size_t(), original.nbytes(),
                     c10::DataPtr(kernelData, c10::Device(c10::DeviceType::CPU)), kernelAllocator(),
                     /*resizable=*/true);
  originalOfAlias_[alias.unsafeGetStorageImpl()] = original.unsafeGetStorageImpl();
  auto inserted = byOriginal_.emplace(original.unsafeGetStorageImpl(),
                                      AliasedStorage{original, std::move(alias), kernelData});
  return inserted.first->second;
}

at::Tensor KernelContext::alias(const at::Tensor& tensor) {
  if (!isOpenReg(tensor)) return tensor;
  TORCH_CHECK(tensor.layout() == c10::kStrided, "openreg supports strided tensors only, got ",
              tensor.layout());
  auto cached = aliasOfTensor_.find(tensor.unsafeGetTensorImpl());
  if (cached != aliasOfTensor_.end()) return cached->second;
  at::Tensor created = makeTensor(aliasStorage(tensor.storage()).alias, c10::DispatchKey::CPU, tensor);
  aliasOfTensor_.emplace(tensor.unsafeGetTensorImpl(), created);
  return created;
}

at::Tensor KernelContext::viewOf(const c10::Storage& storage, const at::Tensor& layout) {
  return makeTensor(storage, c10::DispatchKey::PrivateUse1, layout);
}

c10::Storage KernelContext::adoptStorage(const c10::Storage& cpuStorage) {
  const c10::StorageImpl* key = cpuStorage.unsafeGetStorageImpl();
  auto done = adopted_.find(key);
  if (done != adopted_.end()) return done->second;

  const c10::Device device = openregDevice(device_);
  c10::DataPtr& cpuData = cpuStorage.unsafeGetStorageImpl()->mutable_data_ptr();
  c10::DataPtr deviceData;
  if (cpuData.get() == nullptr) {
    deviceData = c10::DataPtr(nullptr, device);
  } else if (DeviceAllocator::ownsDeleter(cpuData.get_deleter())) {
    // Allocated on the device during the kernel: take ownership, relabel.
    void* devicePointer = devicePointerOf(cpuData.get());
    c10::DeleterFnPtr deleter = cpuData.get_deleter();
    void* context = cpuData.release_context();
    cpuData = c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU));
    deviceData = c10::DataPtr(devicePointer, context, deleter, device);
  } else {
    // Host memory (e.g. allocated on a helper thread): copy it to the device.
    deviceData = deviceAllocator().allocateOn(device_, cpuStorage.nbytes());
    std::memcpy(kernelPointerOf(deviceData.get()), cpuData.get(), cpuStorage.nbytes());
  }
  c10::Storage adopted(c10::Storage::use_byte_size_t(), cpuStorage.nbytes(), std::move(deviceData),
                       &deviceAllocator(), /*resizable=*/true);
  adopted_.emplace(key, adopted);
  return adopted;
}

at::Tensor KernelContext::adopt(const at::Tensor& result) {
  if (!result.defined() || result.device().type() != c10::DeviceType::CPU) return result;
  const c10::StorageImpl* storage = result.storage().unsafeGetStorageImpl();
  auto aliased = originalOfAlias_.find(storage);
  if (aliased != originalOfAlias_.end()) {
    return viewOf(byOriginal_.at(aliased->second).original, result);
  }
  return viewOf(adoptStorage(result.storage()), result);
}

void KernelContext::writeBack(const at::Tensor& original) {
  if (!isOpenReg(original)) return;
  auto cached = aliasOfTensor_.find(original.unsafeGetTensorImpl());
  if (cached == aliasOfTensor_.end()) return;
  const at::Tensor& changed = cached->second;
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
