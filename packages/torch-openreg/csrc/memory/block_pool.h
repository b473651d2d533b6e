// block_pool.h — the caching part of the device allocator, one pool per device.
//
// Tensors come and go far faster than device memory should: every runtime
// allocation is a system call and fresh pages fault on first touch. The pool
// keeps freed blocks and hands them out again without calling the runtime,
// CUDA-style: requests are rounded to 512 bytes; blocks up to 1 MiB are cut
// from 2 MiB segments, larger ones from 20 MiB segments (or their own,
// rounded to 2 MiB, from 10 MiB); a block larger than needed is split and
// freed neighbours are merged again.
//
// Reuse follows stream order, as with CUDA's caching allocator. A free block
// belongs to the stream it was allocated for: the host may hand it out again
// at once for that stream, whose later work runs after every queued use. A
// kernel allocating while it runs (data-dependent results, temporaries, the
// first call of an operator signature) is itself queued work: it may take a
// free block only once the work queued on the stream before the block was
// freed has completed, which each free block records (freedAt, the stream's
// progress at the free). Memory used on other streams is declared with
// Tensor.record_stream: those streams are remembered, and when the block is
// freed an event is recorded on each; the block returns to the pool once
// they have all completed (pending frees are collected at the next
// allocation, empty_cache and out-of-memory), so work queued there by the
// time of the free is protected, however late record_stream was called.
// Out of memory, the pool returns its unused segments to the runtime and
// retries once: on the host after waiting for the device; inside a kernel
// (which cannot wait for its own stream) only the segments no queued work
// still uses.
//
// Two controls mirror torch.cuda's allocator. A per-process memory fraction
// caps the bytes the pool may hold on the device (checked only when a new
// segment is needed, so cached allocations cost nothing more). Private pools
// (torch.openreg.MemPool) own their segments: allocations routed to one by
// use_mem_pool come from its blocks only, and its blocks serve nobody else
// (unless it lends them when the device is full, use_on_oom). A pool lives
// while something uses it; its unused segments go back to the runtime when
// the last MemPool object goes, and blocks still allocated then return with
// the next empty_cache() once freed, as with CUDA. Which pool a thread
// allocates from is thread-local; a synchronous kernel adopts its caller's.
//
// A block sent to other processes (torch.multiprocessing, see
// integration/ipc_sharing.h) is marked shared: freed while another process
// still maps it, it stays allocated — counted where it was allocated, reused
// by nobody — until the runtime reports that no other process holds it any
// more (block_pool_shared.cpp), as CUDA's allocator keeps such blocks in limbo.
#pragma once

#include <openreg.h>

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace torch_openreg {

// A memory pool's id, as torch.cuda.MemPool.id: (0, n) for pools users create;
// (0, 0) is the default pool.
using PoolId = c10::MempoolId_t;
constexpr PoolId kDefaultPool{0, 0};

struct PoolOptions {
  bool useOnOom = false;  // lends its free blocks when the device is out of memory
  bool noSplit = false;   // never cuts a block: allocations never share a segment
};

struct PrivatePool;

struct Block {
  c10::DeviceIndex device;
  orStream_t stream;  // stream the block is allocated for
  size_t size;        // bytes of the block (rounded)
  void* pointer;
  bool small;         // cut from the small-block pool
  size_t requested = 0;
  bool allocated = false;
  Block* previous = nullptr;  // neighbours in the same segment
  Block* next = nullptr;
  // Other streams the memory is used on (Tensor.record_stream), guarded by
  // the pool's mutex; events are recorded on them when the block is freed.
  std::vector<orStream_t> streamUses;
  // While free: the progress of `stream` when the block was freed (work up
  // to there may still use it), see orStreamGetProgress; `settling` while
  // that work has not completed yet (such a block is not merged with free
  // neighbours that kernels could use, see settleFreedBlocks).
  uint64_t freedAt = 0;
  bool settling = false;
  PrivatePool* pool = nullptr;  // the private pool owning the segment (null: default)
  // Sent to another process (markShared); reset when the block is free again.
  bool shared = false;
};

// Free blocks, ordered for best-fit lookup per stream (see takeFree).
struct ByStreamAndSize {
  bool operator()(const Block* a, const Block* b) const;
};
using FreeBlocks = std::set<Block*, ByStreamAndSize>;

// A private pool: its own free blocks, and what keeps it alive.
struct PrivatePool {
  PoolId id;
  PoolOptions options;
  int useCount = 0;
  size_t segments = 0;  // segments it holds (allocated or not)
  FreeBlocks freeSmall;
  FreeBlocks freeLarge;
};

// ---- Observing the pool ------------------------------------------------------
// What the pool did, for an observer (memory history, the profiler's memory
// events): the action, its block or segment, and the pool's totals after it.
// A free is requested when the tensor dies and completed when the block is
// back in the pool (later, for memory recorded on other streams).
enum class PoolAction : uint8_t {
  Alloc,
  FreeRequested,
  Free,
  SegmentAlloc,
  SegmentFree,
  OutOfMemory
};

struct PoolEvent {
  PoolAction action;
  c10::DeviceIndex device;
  void* address;  // null for OutOfMemory
  size_t size;    // bytes of the block or segment (requested bytes for OutOfMemory)
  orStream_t stream;
  size_t allocatedBytes;
  size_t reservedBytes;
};

// One observer for every pool, installed once at load. gather() runs before
// the pool takes its lock, on the thread asking (it may take the GIL to
// capture a stack, which must never happen under the pool's lock); observe()
// runs under the lock with what gather() returned.
struct PoolObserver {
  std::shared_ptr<c10::GatheredContext> (*gather)(bool allocating);
  void (*observe)(const PoolEvent& event, const std::shared_ptr<c10::GatheredContext>& context);
};
void setPoolObserver(const PoolObserver* observer);

// A segment as a snapshot shows it: its blocks in address order.
struct SegmentView {
  enum class State : uint8_t { Allocated, PendingFree, Free };
  struct BlockView {
    void* address;
    size_t size;
    size_t requested;
    State state;
  };
  void* address;
  size_t size;
  orStream_t stream;
  bool small;
  std::vector<BlockView> blocks;
};

class BlockPool {
 public:
  explicit BlockPool(c10::DeviceIndex device) : device_(device) {}
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // Throws c10::OutOfMemoryError (torch.OutOfMemoryError) if the device is full.
  Block* allocate(size_t bytes, orStream_t stream);
  // The block's tensor is gone: it returns to the pool now, or once the work
  // queued on its recorded streams by now has completed.
  void free(Block* block);
  // The allocated block starting at `pointer` (throws if there is none).
  Block* find(void* pointer);
  // Tensor.record_stream: the block is also used on `stream`.
  void recordStream(Block* block, orStream_t stream);
  // The block's memory was sent to another process: when freed, it stays
  // allocated until no other process holds it (block_pool_shared.cpp).
  void markShared(Block* block);
  // Frees the shared blocks freed here that no other process holds any more
  // (torch.openreg.ipc_collect); returns how many freed blocks stay held.
  size_t collectShared();
  // Returns every segment without allocated blocks to the runtime: of the
  // default pool and of private pools nobody uses any more; or of pool `id`.
  void emptyCache(PoolId id = kDefaultPool);

  // Private pools: a use is a MemPool object or a use_mem_pool scope.
  void retainPool(PoolId id, PoolOptions options);
  void releasePool(PoolId id) noexcept;
  int poolUseCount(PoolId id);
  // For a pool nobody uses any more: returns its unused segments to the
  // runtime in stream order (without waiting for the device), and forgets
  // the pool unless blocks of it are still allocated.
  void returnPoolMemory(PoolId id);

  // Caps the bytes this pool holds on the device at `fraction` of its capacity.
  void setMemoryFraction(double fraction);
  double memoryFraction();

  c10::CachingDeviceAllocator::DeviceStats stats();
  // Every segment the pool holds, in address order.
  std::vector<SegmentView> segments();
  void resetAccumulatedStats();
  void resetPeakStats();

 private:
  // Events recorded at a free on the block's recorded streams (null where
  // none could be recorded: the stream's idleness counts instead). Shared, so
  // a thread waiting for them without the pool's lock keeps them alive.
  struct StreamMarks {
    std::vector<std::pair<orStream_t, orEvent_t>> marks;
    StreamMarks() = default;
    StreamMarks(const StreamMarks&) = delete;
    StreamMarks& operator=(const StreamMarks&) = delete;
    ~StreamMarks();
  };
  struct PendingFree {
    Block* block;
    std::shared_ptr<StreamMarks> marks;
  };

  FreeBlocks& freeSet(PrivatePool* pool, bool small);
  Block* takeFree(size_t size, orStream_t stream, bool small, PrivatePool* pool);
  Block* newSegment(size_t size, orStream_t stream, bool small, PrivatePool* pool,
                    std::unique_lock<std::mutex>& lock);
  void* mallocOrRetry(size_t segmentSize, std::unique_lock<std::mutex>& lock);
  void* tryMalloc(size_t segmentSize);
  void releaseCacheFromKernel();
  bool overMemoryLimit(size_t segmentSize) const;
  Block* borrowFromPoolsForOom(size_t size, orStream_t stream, bool small);
  PrivatePool* routedPool(orStream_t stream);
  PrivatePool* findPool(PoolId id);
  void waitForDeviceIdle(std::unique_lock<std::mutex>& lock);
  // Pending frees (block_pool_streams.cpp): events for the recorded streams,
  // and the blocks whose events have completed back into the pool.
  void deferFree(Block* block);
  void collectPendingFrees();
  void waitForPendingFrees(std::unique_lock<std::mutex>& lock);
  // free() once the block is really freed, under the lock.
  void freeLocked(Block* block, const std::shared_ptr<c10::GatheredContext>& context);
  // Shared blocks (block_pool_shared.cpp): whether a freed one must stay
  // held for other processes (then it is held, and free() stops there); the
  // held blocks no process maps any more, freed under the lock (out of
  // memory); whether an allocation should look for such blocks now (at most
  // once a millisecond: each held block costs a system call to ask).
  bool holdForOtherProcesses(Block* block);
  void collectSharedLocked();
  bool sharedCollectionDue();
  // Back into the pool: statistics, freedAt, merged with free neighbours.
  void returnToPool(Block* block, const std::shared_ptr<c10::GatheredContext>& context);
  // Blocks whose freeing work has completed since they were freed join their
  // free neighbours.
  void settleFreedBlocks();
  void splitIfWorthIt(Block* block, size_t size);
  void insertFree(Block* block);
  void removeFree(Block* block);
  Block* mergeWithNeighbours(Block* block);
  // Unused segments of `pool` (null: default), out of the pool and its stats;
  // the caller frees each (first block, size = the segment's) and deletes it.
  // With `onlyIdle`, only segments no queued work may still use.
  std::vector<Block*> takeUnusedSegments(PrivatePool* pool, bool onlyIdle = false);
  void releaseFreeSegments(PrivatePool* pool, bool onlyIdle = false);
  void releaseUnusedPools(bool onlyIdle = false);
  using PrivatePools = std::map<PoolId, std::unique_ptr<PrivatePool>>;
  // Drops a pool that holds no segment and has no users, with its statistics.
  PrivatePools::iterator forgetPool(PrivatePools::iterator entry);
  void updateStat(c10::CachingAllocator::StatArray& stat, bool small, int64_t delta);
  void updateReserved(PrivatePool* pool, bool small, int64_t delta);
  std::string cachedForQueuedWork(size_t reserved, size_t inUse) const;
  [[noreturn]] void throwOutOfMemory(size_t requested, size_t segmentSize);
  void notify(PoolAction action, void* address, size_t size, orStream_t stream,
              const std::shared_ptr<c10::GatheredContext>& context);

  const c10::DeviceIndex device_;
  std::mutex mutex_;
  FreeBlocks freeSmall_;
  FreeBlocks freeLarge_;
  std::unordered_map<void*, Block*> allocated_;
  std::vector<PendingFree> pendingFrees_;
  std::vector<Block*> heldForOtherProcesses_;  // freed shared blocks still mapped elsewhere
  std::atomic<size_t> heldCount_{0};          // its size, read without the lock
  std::atomic<int64_t> lastSharedCollection_{0};  // steady clock, nanoseconds
  std::unordered_set<Block*> settling_;  // free blocks with `settling` set
  c10::CachingDeviceAllocator::DeviceStats stats_;
  PrivatePools privatePools_;
  double memoryFraction_ = 1.0;
  size_t memoryLimit_ = 0;  // bytes the fraction allows; 0: no limit set
};

BlockPool& blockPool(c10::DeviceIndex device);

// For tests only (torch_openreg._C._set_allocator_fault): breaks one rule of
// every pool on purpose, so a test can show that the race detector catches
// memory reused under queued work without believing the pool.
enum class AllocatorFault : uint8_t {
  None,
  IgnoreRecordedStreams,    // frees return at once, whatever record_stream said
  KernelsIgnoreQueuedWork,  // kernels take blocks that queued work still uses
};
void setAllocatorFault(AllocatorFault fault);

// Routes this thread's allocations on `device` to pool `id` (retained by the
// caller) until endAllocateToPool; routes nest and the innermost one wins.
void beginAllocateToPool(c10::DeviceIndex device, PoolId id);
void endAllocateToPool(c10::DeviceIndex device, PoolId id);

// This thread's routes, for work run on its behalf on another thread (a
// synchronous kernel) to adopt for a scope.
using PoolRoutes = std::vector<std::pair<c10::DeviceIndex, PoolId>>;
PoolRoutes currentPoolRoutes();
class PoolRoutesScope {
 public:
  explicit PoolRoutesScope(PoolRoutes routes);
  ~PoolRoutesScope();
  PoolRoutesScope(const PoolRoutesScope&) = delete;
  PoolRoutesScope& operator=(const PoolRoutesScope&) = delete;

 private:
  PoolRoutes saved_;
};

}  // namespace torch_openreg
