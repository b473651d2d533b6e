// kernel_context.h — CPU aliases of openreg tensors, for one kernel launch.
//
// Inside stream work, an openreg tensor is reached through a CPU tensor that
// views the same bytes at their kernel-view address (alias). CPU kernels run
// on aliases unchanged. Aliases are metadata: they do not own device memory;
// only the work dereferences them. Synchronous work makes them on the worker
// (KernelContext); asynchronous work has the host record descriptors and the
// worker make the aliases when it runs (DeferredAliases, below).
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

#include <atomic>
#include <utility>
#include <vector>

#include "engine/tensor_layout.h"

namespace torch_openreg {

inline bool isOpenReg(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().type() == c10::DeviceType::PrivateUse1;
}

// Raises unless the storage of `tensor` holds every element its layout reaches:
// a kernel or copy reading them would otherwise leave the allocation (a storage
// resized below its tensors' needs with untyped_storage().resize_()).
void checkStorageCovers(const at::Tensor& tensor);

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
  static bool isSparse(const at::Tensor& tensor);

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

// CPU aliases described on the caller's thread and made on the stream worker.
//
// An asynchronous kernel needs its aliases only when it runs. Making them at
// launch (a StorageImpl and a TensorImpl per tensor) was a large share of the
// caller's cost per operator, so the caller records instead what each alias
// will be: the kernel-view address and size of its storage, the tensor's
// layout at the moment of the call, and which recorded tensors share a
// storage on the device. The worker makes the aliases from that
// (materialize()). Tensors that share a storage on the device get aliases
// sharing one CPU storage, exactly as KernelContext::alias() gives them, so a
// kernel sees the arguments' aliasing (an in-place operator on a view of its
// input, out= into a view of an input). Values that are not openreg tensors
// (host snapshots, wrapped numbers, undefined tensors) are kept as they are.
// Like aliases, the descriptors do not own device memory: its lifetime stays
// the caller's tensors', and the caching allocator reuses it in stream order.
class DeferredAliases {
 public:
  // Records the alias-to-be of `tensor` and returns its index. Raises on the
  // caller, at launch, for what alias() would refuse (the storage does not
  // cover the tensor, memory that is not openreg memory, a sparse or nested
  // tensor: their operators run synchronously through KernelContext).
  size_t record(const at::Tensor& tensor);
  // Room for `tensors` records (a foreach operator records a few per list
  // element: growing one by one would move every recorded layout each time).
  void reserve(size_t tensors) { entries_.reserve(tensors); }

  size_t size() const { return entries_.size(); }
  // The layout recorded for entry `index` (undefined for kept values).
  const TensorLayout& layout(size_t index) const { return entries_[index].layout; }
  // The kernel-view address and size of entry `index`'s storage (null, 0 for
  // kept values).
  std::pair<void*, size_t> memory(size_t index) const;

  DeferredAliases() = default;
  // A copy or a move takes the records, not the aliases kept for reuse.
  DeferredAliases(const DeferredAliases& other)
      : storages_(other.storages_), entries_(other.entries_) {}
  DeferredAliases(DeferredAliases&& other) noexcept
      : storages_(std::move(other.storages_)), entries_(std::move(other.entries_)) {}
  DeferredAliases& operator=(const DeferredAliases&) = delete;
  DeferredAliases& operator=(DeferredAliases&&) = delete;

  class Made;
  // On the worker: the aliases (and kept values), in recording order, for one
  // run of the work (see Made).
  Made materialize() const;

 private:
  struct StorageEntry {
    const c10::StorageImpl* original;  // identity only: never dereferenced after record()
    void* kernelData;
    size_t nbytes;
  };
  struct Entry {
    int storage = -1;  // index into storages_; -1: `kept` is used as it is
    // The same tensor passed twice gets one alias, as alias() gives it (CPU
    // kernels test is_same()): the index of its first entry, or -1.
    int sameAs = -1;
    const at::TensorImpl* original = nullptr;  // identity only, like StorageEntry's
    TensorLayout layout;
    bool conjugate = false;
    bool negative = false;
    at::Tensor kept;
  };

  size_t storageIndex(const c10::Storage& original);
  int firstEntryOf(const at::TensorImpl* original) const;

  // One run's aliases and the CPU storages under them.
  struct Aliases {
    c10::SmallVector<c10::Storage, 4> storages;
    c10::SmallVector<at::Tensor, 4> tensors;
  };
  Aliases make() const;
  bool unchanged(const Aliases& aliases) const;

  // An operator has a handful of tensors: inline storage for four.
  c10::SmallVector<StorageEntry, 4> storages_;
  c10::SmallVector<Entry, 4> entries_;
  // The aliases of the last run, for the next (a graph replays its work).
  // `reusing_` is held by the run that took them: two replays of one graph on
  // two streams may run the same work at once, and the second makes its own.
  // Kept only from the second run on: eager work runs once, and its aliases
  // must die on the worker that made them, not with the launch on the host
  // thread (which frees launches: see kernel_launch.cpp).
  mutable Aliases kept_;
  mutable bool ranBefore_ = false;
  mutable std::atomic<bool> reusing_{false};
};

// The aliases of one run. A graph replays the same work many times, and
// making the aliases was a large share of a replayed operator's cost, so when
// a run ends its aliases go back to their DeferredAliases, and the next run
// reuses them if the kernel left every one over the same CPU storage, with the
// same memory and layout, as they were made (an out= kernel may resize its
// output, for one). Otherwise it makes new ones. A run keeps its aliases
// only if the work ran before: work that runs once (eager launches) keeps none.
class DeferredAliases::Made {
 public:
  explicit Made(const DeferredAliases& owner);
  ~Made();
  Made(const Made&) = delete;
  Made& operator=(const Made&) = delete;

  operator c10::ArrayRef<at::Tensor>() const { return aliases_.tensors; }  // NOLINT
  const at::Tensor& operator[](size_t index) const { return aliases_.tensors[index]; }
  const at::Tensor* begin() const { return aliases_.tensors.begin(); }
  const at::Tensor* end() const { return aliases_.tensors.end(); }

 private:
  const DeferredAliases& owner_;
  bool owned_;  // this run holds the owner's reuse slot
  Aliases aliases_;
};

}  // namespace torch_openreg
