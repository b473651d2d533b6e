// device_allocator.h — the c10::DeviceAllocator for openreg device memory.
//
// Registered for DeviceType::PrivateUse1, so at::empty(device="openreg"),
// torch.accelerator.memory_* and the stats in torch.openreg all use it.
// Memory comes from a caching pool per device (block_pool.h); a DataPtr's
// context is its Block. Also the allocator controls of torch.cuda that have
// no c10 interface: raw allocations (caching_allocator_alloc), the memory
// fraction and memory pools (MemPool).
#pragma once

#include <openreg.h>

#include <c10/core/CachingDeviceAllocator.h>

#include <cstddef>
#include <mutex>
#include <unordered_map>

#include "memory/block_pool.h"

namespace torch_openreg {

class DeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override;  // on the current device
  // On `device`, for its current stream / for `stream` (a stream of `device`).
  c10::DataPtr allocateOn(c10::DeviceIndex device, size_t nbytes);
  c10::DataPtr allocateOn(c10::DeviceIndex device, size_t nbytes, orStream_t stream);
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t mempool_id = {0, 0}) override;
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

  // A DataPtr owning the live allocation that starts at `devicePointer`
  // (whose previous DataPtr released its context). Used to re-label memory
  // a CPU kernel allocated through its kernel view.
  c10::DataPtr ownerOf(void* devicePointer);
  // Frees the live allocation starting at `devicePointer`.
  void freeByPointer(void* devicePointer);
  // Whether `ptr` is memory of this allocator (a DataPtr it made).
  bool owns(const c10::DataPtr& ptr) const;
  // `ptr` (memory of this allocator) was sent to another process: its block
  // stays allocated after the free while other processes map it.
  void markShared(const c10::DataPtr& ptr);

  // Memory owned by the caller until rawDelete (torch.openreg.caching_allocator_alloc),
  // allocated for `stream` of `device`.
  void* rawAllocate(c10::DeviceIndex device, size_t nbytes, orStream_t stream);
  void rawDelete(void* devicePointer);

  void setMemoryFraction(c10::DeviceIndex device, double fraction);
  double memoryFraction(c10::DeviceIndex device);

 private:
  std::mutex rawMutex_;
  std::unordered_map<void*, Block*> rawAllocations_;
};

DeviceAllocator& deviceAllocator();

// A private memory pool (torch.openreg.MemPool): created on the current
// device, released (its unused memory returned) when destroyed.
class MemPool {
 public:
  explicit MemPool(PoolOptions options);
  ~MemPool();
  MemPool(const MemPool&) = delete;
  MemPool& operator=(const MemPool&) = delete;

  PoolId id() const { return id_; }
  c10::DeviceIndex device() const { return device_; }
  int useCount() const;
  // use_mem_pool: this thread's allocations on `device` come from the pool.
  void beginAllocating(c10::DeviceIndex device) const;
  void endAllocating(c10::DeviceIndex device) const;

 private:
  PoolId id_;
  c10::DeviceIndex device_;
  PoolOptions options_;
};

}  // namespace torch_openreg
