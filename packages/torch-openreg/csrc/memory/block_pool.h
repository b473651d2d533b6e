// block_pool.h — the caching part of the device allocator, one pool per device.
//
// Tensors come and go far faster than device memory should: every runtime
// allocation is a system call and fresh pages fault on first touch. The pool
// keeps freed blocks and hands them out again without calling the runtime,
// CUDA-style: requests are rounded to 512 bytes; blocks up to 1 MiB are cut
// from 2 MiB segments, larger ones from 20 MiB segments (or their own,
// rounded to 2 MiB, from 10 MiB); a block larger than needed is split and
// freed neighbours are merged again. Free blocks are kept per stream: a block
// freed while queued work may still use it is only handed out again for the
// same stream, whose later work runs after that use (stream order) — which
// is why kernels need not keep the memory they use alive. Memory a kernel
// allocates while it runs (temporaries, results) comes from a separate,
// kernel-private pool per stream: a block the host freed may still be needed
// by work queued after the running kernel, so kernels must not reuse it. Returning cached
// segments to the runtime (empty_cache, and out-of-memory, which releases
// the cache and retries once before raising) first waits for the device.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <openreg.h>

#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

namespace torch_openreg {

struct Block {
  c10::DeviceIndex device;
  orStream_t stream;  // stream the block is allocated for
  size_t size;        // bytes of the block (rounded)
  void* pointer;
  bool small;         // cut from the small-block pool
  bool kernelPool = false;  // free in the stream's kernel-private pool
  size_t requested = 0;
  bool allocated = false;
  Block* previous = nullptr;  // neighbours in the same segment
  Block* next = nullptr;
  // Streams recorded with Tensor.record_stream, with an event marking the
  // work queued there at the time (guarded by the pool's mutex).
  std::vector<std::pair<orStream_t, orEvent_t>> recordedUses;
};

class BlockPool {
 public:
  explicit BlockPool(c10::DeviceIndex device) : device_(device) {}
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // Throws c10::OutOfMemoryError (torch.OutOfMemoryError) if the device is full.
  // Inside kernel work, blocks come from (and return to) the kernel pool.
  Block* allocate(size_t bytes, orStream_t stream);
  void release(Block* block);
  // The allocated block starting at `pointer` (throws if there is none).
  Block* find(void* pointer);
  void recordUse(Block* block, orStream_t stream, orEvent_t event);
  // Takes the recorded uses whose work has not completed yet.
  std::vector<std::pair<orStream_t, orEvent_t>> takePendingUses(Block* block);
  // Returns every segment without allocated blocks to the runtime.
  void emptyCache();

  c10::CachingDeviceAllocator::DeviceStats stats();
  void resetAccumulatedStats();
  void resetPeakStats();

 private:
  struct ByStreamAndSize {
    bool operator()(const Block* a, const Block* b) const;
  };
  using FreeBlocks = std::set<Block*, ByStreamAndSize>;

  FreeBlocks& poolFor(bool small) { return small ? freeSmall_ : freeLarge_; }
  Block* takeFree(size_t size, orStream_t stream, bool small);
  Block* newSegment(size_t size, orStream_t stream, bool small, std::unique_lock<std::mutex>& lock);
  void* mallocOrRetry(size_t segmentSize, size_t requested, std::unique_lock<std::mutex>& lock);
  void waitForDeviceIdle(std::unique_lock<std::mutex>& lock);
  void splitIfWorthIt(Block* block, size_t size);
  void insertFree(Block* block);
  void removeFree(Block* block);
  Block* mergeWithNeighbours(Block* block);
  void releaseFreeSegments();
  void updateStat(c10::CachingAllocator::StatArray& stat, bool small, int64_t delta);
  [[noreturn]] void throwOutOfMemory(size_t requested, size_t segmentSize);

  const c10::DeviceIndex device_;
  std::mutex mutex_;
  FreeBlocks freeSmall_;
  FreeBlocks freeLarge_;
  std::unordered_map<void*, Block*> allocated_;
  c10::CachingDeviceAllocator::DeviceStats stats_;
};

BlockPool& blockPool(c10::DeviceIndex device);

}  // namespace torch_openreg
