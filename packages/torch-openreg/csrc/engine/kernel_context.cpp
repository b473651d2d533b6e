// kernel_context.cpp — alias creation and result adoption.
#include "engine/kernel_context.h"

#include <ATen/EmptyTensor.h>
#include <ATen/NestedTensorImpl.h>
#include <c10/util/Exception.h>

#include <cstring>

#include "base/address_ranges.h"
#include "base/device.h"
#include "base/runtime_check.h"
#include "engine/kernel_allocator.h"
#include "engine/tensor_layout.h"
#include "integration/device_allocator.h"

namespace torch_openreg {
namespace {

// A nested tensor over `storage` with the nested layout of `layout`.
at::Tensor makeNested(c10::Storage storage, c10::DispatchKey backend, const at::Tensor& layout) {
  const auto* nested = at::native::get_nested_tensor_impl(layout);
  const int64_t elements = static_cast<int64_t>(storage.nbytes() / layout.itemsize());
  auto buffer = c10::make_intrusive<c10::TensorImpl>(std::move(storage),
                                                     c10::DispatchKeySet(backend), layout.dtype());
  buffer->set_sizes_contiguous({elements});
  return at::detail::make_tensor<at::native::NestedTensorImpl>(
      at::Tensor(std::move(buffer)), nested->get_nested_sizes(), nested->get_nested_strides(),
      nested->get_storage_offsets());
}

at::Tensor makeLike(c10::Storage storage, c10::DispatchKey backend, const at::Tensor& layout) {
  if (layout.is_nested()) return makeNested(std::move(storage), backend, layout);
  return tensorOver(std::move(storage), backend, layout);
}

}  // namespace

void checkStorageCovers(const at::Tensor& tensor) {
  if (tensor.is_nested() || tensor.numel() == 0) return;
  // Most tensors are contiguous from the start of their storage: they reach
  // exactly their elements, which spares the general computation per launch.
  const bool packed = tensor.storage_offset() == 0 && tensor.is_contiguous();
  const size_t needed =
      packed ? static_cast<size_t>(tensor.numel()) * tensor.itemsize()
             : at::detail::computeStorageNbytes(tensor.sizes(), tensor.strides(), tensor.itemsize(),
                                                tensor.storage_offset());
  const size_t available = tensor.storage().nbytes();
  TORCH_CHECK(needed <= available, "openreg: this tensor of shape ", tensor.sizes(), " and dtype ",
              tensor.scalar_type(), " needs ", needed,
              " bytes of storage, but its storage holds only ", available,
              " bytes (was it resized with untyped_storage().resize_()?); resize the tensor "
              "with tensor.resize_() or give it a storage large enough");
}

bool KernelContext::isSparse(const at::Tensor& tensor) {
  const c10::Layout layout = tensor.layout();
  return layout == c10::kSparse || layout == c10::kSparseCsr || layout == c10::kSparseCsc ||
         layout == c10::kSparseBsr || layout == c10::kSparseBsc;
}

KernelContext::AliasedStorage& KernelContext::aliasStorage(const c10::Storage& original) {
  if (AliasedStorage* found = byOriginal_.find(original.unsafeGetStorageImpl())) return *found;
  void* kernelData = original.data() == nullptr
                         ? nullptr
                         : toKernelView(original.data(), original.device().index());
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
  if (isSparse(tensor)) return aliasSparse(tensor);
  TORCH_CHECK(tensor.layout() == c10::kStrided || tensor.is_nested(),
              "openreg supports strided, nested and sparse tensors only, got ", tensor.layout());
  if (at::Tensor* cached = aliasOfTensor_.find(tensor.unsafeGetTensorImpl())) return *cached;
  checkStorageCovers(tensor);
  const c10::Storage& storage = aliasStorage(tensor.storage()).alias;
  at::Tensor created = makeLike(storage, c10::DispatchKey::CPU, tensor);
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
    std::memcpy(toKernelView(deviceData.get(), device_), cpuData.get(), cpuStorage.nbytes());
  }
  c10::Storage adopted(c10::Storage::use_byte_size_t(), cpuStorage.nbytes(), std::move(deviceData),
                       &deviceAllocator(), /*resizable=*/true);
  return adopted_.insert(key, std::move(adopted));
}

at::Tensor KernelContext::adopt(const at::Tensor& result) {
  if (!result.defined() || result.device().type() != c10::DeviceType::CPU) return result;
  if (isSparse(result)) return adoptSparse(result);
  TORCH_CHECK(result.layout() == c10::kStrided || result.is_nested(),
              "openreg supports strided, nested and sparse tensors only; this operation produced "
              "a ",
              result.layout(), " tensor. Run it on the CPU instead (tensor.cpu()).");
  const c10::StorageImpl* storage = result.storage().unsafeGetStorageImpl();
  if (const c10::StorageImpl** original = originalOfAlias_.find(storage)) {
    return viewOf(byOriginal_.find(*original)->original, result);
  }
  return viewOf(adoptStorage(result.storage()), result);
}

void KernelContext::writeBack(const at::Tensor& original) {
  if (!isOpenReg(original) || original.is_nested()) return;
  if (isSparse(original)) return writeBackSparse(original);
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

// ---- Deferred aliases ----------------------------------------------------------

size_t DeferredAliases::storageIndex(const c10::Storage& original) {
  const c10::StorageImpl* identity = original.unsafeGetStorageImpl();
  for (size_t i = 0; i < storages_.size(); ++i) {
    if (storages_[i].original == identity) return i;
  }
  void* kernelData = original.data() == nullptr
                         ? nullptr
                         : toKernelView(original.data(), original.device().index());
  storages_.push_back(StorageEntry{identity, kernelData, original.nbytes()});
  return storages_.size() - 1;
}

int DeferredAliases::firstEntryOf(const at::TensorImpl* original) const {
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].original == original) return static_cast<int>(i);
  }
  return -1;
}

size_t DeferredAliases::record(const at::Tensor& tensor) {
  // Filled in place: an entry holds a layout (two small vectors), which
  // moving into the list would copy again.
  Entry& entry = entries_.emplace_back();
  const int first = isOpenReg(tensor) ? firstEntryOf(tensor.unsafeGetTensorImpl()) : -1;
  if (first >= 0) {
    entry.sameAs = first;
    entry.storage = entries_[first].storage;
    entry.layout = entries_[first].layout;
  } else if (isOpenReg(tensor)) {
    entry.original = tensor.unsafeGetTensorImpl();
    // Sparse and nested tensors are planned synchronously: never recorded.
    TORCH_CHECK(tensor.layout() == c10::kStrided && !tensor.is_nested(),
                "openreg internal error: a ", tensor.layout(),
                " tensor reached an asynchronous kernel");
    checkStorageCovers(tensor);
    entry.storage = static_cast<int>(storageIndex(tensor.storage()));
    entry.layout = TensorLayout::of(tensor);
    entry.conjugate = tensor.is_conj();
    entry.negative = tensor.is_neg();
  } else {
    entry.kept = tensor;
  }
  return entries_.size() - 1;
}

std::pair<void*, size_t> DeferredAliases::memory(size_t index) const {
  const int storage = entries_[index].storage;
  if (storage < 0) return {nullptr, 0};
  return {storages_[storage].kernelData, storages_[storage].nbytes};
}

DeferredAliases::Aliases DeferredAliases::make() const {
  // One CPU storage per device storage: aliasing is kept. Resizable with the
  // kernel allocator, like alias()'s (an out= kernel may resize its output).
  Aliases made;
  made.storages.reserve(storages_.size());
  for (const StorageEntry& entry : storages_) {
    made.storages.emplace_back(c10::Storage::use_byte_size_t(), entry.nbytes,
                               c10::DataPtr(entry.kernelData, c10::Device(c10::DeviceType::CPU)),
                               kernelAllocator(), /*resizable=*/true);
  }
  made.tensors.reserve(entries_.size());
  for (const Entry& entry : entries_) {
    if (entry.storage < 0 || entry.sameAs >= 0) {
      at::Tensor reused = entry.sameAs >= 0 ? made.tensors[entry.sameAs] : entry.kept;
      made.tensors.push_back(std::move(reused));
      continue;
    }
    at::Tensor alias =
        tensorOver(made.storages[entry.storage], c10::DispatchKey::CPU, entry.layout);
    alias.unsafeGetTensorImpl()->_set_conj(entry.conjugate);
    alias.unsafeGetTensorImpl()->_set_neg(entry.negative);
    made.tensors.push_back(std::move(alias));
  }
  return made;
}

bool DeferredAliases::unchanged(const Aliases& aliases) const {
  if (aliases.tensors.size() != entries_.size() || aliases.storages.size() != storages_.size()) {
    return false;
  }
  for (size_t i = 0; i < storages_.size(); ++i) {
    const c10::Storage& storage = aliases.storages[i];
    if (storage.data() != storages_[i].kernelData || storage.nbytes() != storages_[i].nbytes) {
      return false;
    }
  }
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& entry = entries_[i];
    const at::Tensor& alias = aliases.tensors[i];
    if (entry.storage < 0) continue;
    if (alias.storage().unsafeGetStorageImpl() !=
            aliases.storages[entry.storage].unsafeGetStorageImpl() ||
        !entry.layout.matches(alias) || alias.is_conj() != entry.conjugate ||
        alias.is_neg() != entry.negative) {
      return false;
    }
  }
  return true;
}

DeferredAliases::Made DeferredAliases::materialize() const { return Made(*this); }

DeferredAliases::Made::Made(const DeferredAliases& owner)
    : owner_(owner), owned_(!owner.reusing_.exchange(true, std::memory_order_acquire)) {
  if (owned_ && !owner_.kept_.tensors.empty()) {
    aliases_ = std::exchange(owner_.kept_, Aliases{});
  } else {
    aliases_ = owner_.make();
  }
}

DeferredAliases::Made::~Made() {
  if (!owned_) return;
  // Changed aliases are dropped now: a storage the kernel resized owns memory.
  if (owner_.ranBefore_ && owner_.unchanged(aliases_)) owner_.kept_ = std::move(aliases_);
  owner_.ranBefore_ = true;
  owner_.reusing_.store(false, std::memory_order_release);
}

}  // namespace torch_openreg
