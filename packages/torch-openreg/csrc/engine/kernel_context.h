// kernel_context.h — CPU aliases of openreg tensors, for one kernel launch.
//
// Inside stream work, an openreg tensor is reached through a CPU tensor that
// views the same bytes at their kernel-view address (alias). CPU kernels run
// on aliases unchanged. Aliases are metadata: they do not own device memory
// and may be made when work is enqueued; only the work dereferences them.
// After a synchronous kernel, the context maps CPU results back:
//   * a result viewing an input's alias storage -> a view of that input;
//   * a result allocated during the kernel (device memory, see
//     kernel_allocator.h) -> an openreg tensor owning that memory;
//   * anything else (host memory) -> copied into new device memory.
// and applies in-place metadata changes (resize) of mutated aliases back to
// the openreg tensors (adopt/writeBack: inside runOnDevice() only).
// Sparse tensors (COO, CSR, CSC, BSR, BSC) are aliased member by member: see
// sparse_context.cpp.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <utility>
#include <vector>

namespace torch_openreg {

inline bool isOpenReg(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().type() == c10::DeviceType::PrivateUse1;
}

class KernelContext {
 public:
  explicit KernelContext(c10::DeviceIndex device) : device_(device) {}

  // CPU alias of an openreg tensor (other tensors are returned unchanged).
  at::Tensor alias(const at::Tensor& tensor);
  // The openreg tensor for a CPU result of a kernel.
  at::Tensor adopt(const at::Tensor& result);
  // Applies size/stride/storage changes of `alias(original)` to `original`.
  void writeBack(const at::Tensor& original);

  // COO or compressed (CSR, CSC, BSR, BSC).
  static bool isSparse(const at::Tensor& tensor) {
    const c10::Layout layout = tensor.layout();
    return layout == c10::kSparse || layout == c10::kSparseCsr || layout == c10::kSparseCsc ||
           layout == c10::kSparseBsr || layout == c10::kSparseBsc;
  }

  c10::DeviceIndex device() const { return device_; }

 private:
  struct AliasedStorage {
    c10::Storage original;  // openreg storage
    c10::Storage alias;     // CPU storage over its kernel view
    void* kernelData;       // alias data pointer at creation
  };

  AliasedStorage& aliasStorage(const c10::Storage& original);
  at::Tensor viewOf(const c10::Storage& storage, const at::Tensor& layout);
  c10::Storage adoptStorage(const c10::Storage& cpuStorage);

  // Sparse tensors (sparse_context.cpp): a sparse CPU tensor over aliases of
  // the members, and its inverse for results and mutated arguments.
  struct SparseAlias {
    at::Tensor original;
    at::Tensor alias;
    c10::SmallVector<at::Tensor, 3> originalMembers;
    c10::SmallVector<at::Tensor, 3> memberAliases;
  };
  at::Tensor aliasSparse(const at::Tensor& tensor);
  at::Tensor adoptSparse(const at::Tensor& result);
  at::Tensor adoptMember(const at::Tensor& member, bool writeBackOriginal);
  void writeBackSparse(const at::Tensor& original);
  SparseAlias* findSparseAlias(const at::TensorImpl* original);

  // An operator has a handful of tensors: linear search in a vector beats a
  // hash map, and a context is built for every operator call (inline storage
  // for four entries: no heap allocation in the common case).
  template <typename Key, typename Value>
  struct SmallMap {
    c10::SmallVector<std::pair<Key, Value>, 4> entries;
    Value* find(Key key) {
      for (auto& entry : entries) {
        if (entry.first == key) return &entry.second;
      }
      return nullptr;
    }
    Value& insert(Key key, Value value) {
      entries.emplace_back(key, std::move(value));
      return entries.back().second;
    }
  };

  c10::DeviceIndex device_;
  SmallMap<const c10::StorageImpl*, AliasedStorage> byOriginal_;
  SmallMap<const c10::StorageImpl*, const c10::StorageImpl*> originalOfAlias_;
  SmallMap<const c10::StorageImpl*, c10::Storage> adopted_;
  SmallMap<const at::TensorImpl*, at::Tensor> aliasOfTensor_;
  // Empty (no allocation) for the dense operators that are the common case.
  std::vector<SparseAlias> sparseAliases_;
};

}  // namespace torch_openreg
