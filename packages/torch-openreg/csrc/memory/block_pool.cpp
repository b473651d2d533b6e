// block_pool.cpp — size classes, splitting, merging, per-stream reuse, OOM
// retry, the memory fraction and private pools. Recorded streams and pending
// frees are in block_pool_streams.cpp, blocks shared with other processes in
// block_pool_shared.cpp.
#include "memory/block_pool.h"

#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/brief_lock.h"
#include "base/byte_units.h"
#include "base/debug_modes.h"
#include "base/device.h"
#include "base/gil.h"
#include "base/kernel_thread.h"
#include "base/runtime_check.h"
#include "base/stream_capture.h"

namespace torch_openreg {
namespace {

using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;

constexpr size_t kRounding = 512;
constexpr size_t kSmallRequest = size_t{1} << 20;      // up to 1 MiB: small pool
constexpr size_t kSmallSegment = size_t{2} << 20;      // small pool segments
constexpr size_t kSharedLargeLimit = size_t{10} << 20;  // below: shared large segments
constexpr size_t kSharedLargeSegment = size_t{20} << 20;
constexpr size_t kSegmentRounding = size_t{2} << 20;

size_t roundRequest(size_t bytes) {
  return bytes < kRounding ? kRounding : (bytes + kRounding - 1) / kRounding * kRounding;
}

size_t segmentSizeFor(size_t size) {
  if (size <= kSmallRequest) return kSmallSegment;
  if (size < kSharedLargeLimit) return kSharedLargeSegment;
  return (size + kSegmentRounding - 1) / kSegmentRounding * kSegmentRounding;
}

// OPENREG_DEBUG=poison: every block handed out is filled with kPoisonByte
// first, so reading memory nobody wrote gives NaN / -1 on every run. The fill
// is stream work on the block's stream, queued before anything the caller
// enqueues with the new tensor: it runs after every earlier use of the block
// on that stream (stream-ordered reuse), never under a kernel still reading
// it. A block allocated inside a kernel is filled at once: that kernel is the
// stream's running work.
void poison(const Block& block) {
  // Not for a stream that captures a graph: the fill would run now, unordered
  // with the graph's replays (on whatever stream is current then).
  if (captureUnderway() && captureOf(block.stream) != nullptr) return;
  if (insideKernel()) {
    void* kernelView = nullptr;
    OPENREG_CHECK(orGetKernelPointer(&kernelView, block.pointer));
    std::memset(kernelView, kPoisonByte, block.size);
    return;
  }
  DeviceScope scope(block.device);
  OPENREG_CHECK(orMemsetAsync(block.pointer, kPoisonByte, block.size, block.stream));
}

std::atomic<const PoolObserver*> poolObserver{nullptr};

std::shared_ptr<c10::GatheredContext> observerContext(bool allocating) {
  const PoolObserver* observer = poolObserver.load(std::memory_order_acquire);
  return observer != nullptr ? observer->gather(allocating) : nullptr;
}

bool wholeSegment(const Block* block) {
  return block->previous == nullptr && block->next == nullptr;
}

// Free, and in the pool: neither allocated nor waiting for recorded streams.
bool isFree(const Block& block) { return !block.allocated && block.streamUses.empty(); }

// How much of `stream`'s work has completed (0 if the runtime cannot say,
// which keeps kernels away from the blocks it concerns).
uint64_t completedWork(orStream_t stream) {
  unsigned long long completed = 0;
  return succeeded(orStreamGetProgress(stream, nullptr, &completed)) ? completed : 0;
}

// A block of `stream` is freed: how far the stream had come (work up to there
// may still use the block), and whether that work has completed already.
// Inside a kernel of that stream, the work queued behind the kernel runs
// after the free in stream order, so only the work before it counts.
struct FreePoint {
  uint64_t freedAt;
  bool settled;
};
FreePoint freePointOf(orStream_t stream) {
  unsigned long long enqueued = 0, completed = 0;
  if (!succeeded(orStreamGetProgress(stream, &enqueued, &completed))) return {UINT64_MAX, false};
  const uint64_t freedAt = stream == runningKernelStream() ? completed : enqueued;
  return {freedAt, freedAt <= completed};
}

template <typename Visit>
void forEachStat(c10::CachingDeviceAllocator::DeviceStats& stats, Visit&& visit) {
  for (auto* array : {&stats.allocation, &stats.segment, &stats.active, &stats.inactive_split,
                      &stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes,
                      &stats.inactive_split_bytes, &stats.requested_bytes}) {
    for (auto& stat : *array) visit(stat);
  }
  for (auto& [id, array] : stats.reserved_bytes_by_private_pools) {
    for (auto& stat : array) visit(stat);
  }
}

// This thread's use_mem_pool routes (device, pool), innermost last.
thread_local PoolRoutes threadRoutes;

std::atomic<AllocatorFault> injectedFault{AllocatorFault::None};

bool faultInjected(AllocatorFault fault) {
  return injectedFault.load(std::memory_order_relaxed) == fault;
}

}  // namespace

bool ByStreamAndSize::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return a->pointer < b->pointer;
}

void BlockPool::updateStat(StatArray& stat, bool small, int64_t delta) {
  const auto pool = static_cast<size_t>(small ? StatType::SMALL_POOL : StatType::LARGE_POOL);
  for (size_t index : {static_cast<size_t>(StatType::AGGREGATE), pool}) {
    delta >= 0 ? stat[index].increase(static_cast<size_t>(delta))
               : stat[index].decrease(static_cast<size_t>(-delta));
  }
}

Block* BlockPool::allocate(size_t bytes, orStream_t stream) {
  const size_t size = roundRequest(bytes);
  const bool small = size <= kSmallRequest;
  // Shared blocks other processes have let go of are free memory again.
  if (heldCount_.load(std::memory_order_relaxed) != 0 && sharedCollectionDue()) collectShared();
  const auto context = observerContext(true);
  auto lock = lockBriefly(mutex_);
  if (!pendingFrees_.empty()) collectPendingFrees();
  settleFreedBlocks();
  PrivatePool* pool = routedPool(stream);
  Block* block = takeFree(size, stream, small, pool);
  if (block == nullptr) {
    block = newSegment(size, stream, small, pool, lock);
    notify(PoolAction::SegmentAlloc, block->pointer, block->size, stream, context);
  }
  if (block->pool == nullptr || !block->pool->options.noSplit) splitIfWorthIt(block, size);
  block->allocated = true;
  block->settling = false;
  block->requested = bytes;
  allocated_.emplace(block->pointer, block);
  for (auto* stat : {&stats_.allocation, &stats_.active}) updateStat(*stat, small, 1);
  for (auto* stat : {&stats_.allocated_bytes, &stats_.active_bytes}) {
    updateStat(*stat, small, static_cast<int64_t>(block->size));
  }
  updateStat(stats_.requested_bytes, small, static_cast<int64_t>(bytes));
  notify(PoolAction::Alloc, block->pointer, block->size, stream, context);
  lock.unlock();  // the fill may wait for queue space on the worker
  if (debugModeOn(kDebugPoison)) poison(*block);
  return block;
}

FreeBlocks& BlockPool::freeSet(PrivatePool* pool, bool small) {
  if (pool == nullptr) return small ? freeSmall_ : freeLarge_;
  return small ? pool->freeSmall : pool->freeLarge;
}

PrivatePool* BlockPool::routedPool(orStream_t stream) {
  // A capturing stream allocates from its graph's pool, whichever thread asks
  // (autograd launches a backward from its own threads); kernels running on
  // the worker allocate for themselves, not for the graph.
  c10::MempoolId_t captured;
  if (C10_UNLIKELY(captureUnderway()) && !insideKernel() && capturePoolOf(stream, &captured)) {
    if (PrivatePool* pool = findPool(captured)) return pool;
  }
  if (C10_LIKELY(threadRoutes.empty())) return nullptr;
  for (auto route = threadRoutes.rbegin(); route != threadRoutes.rend(); ++route) {
    if (route->first == device_) return findPool(route->second);
  }
  return nullptr;
}

PrivatePool* BlockPool::findPool(PoolId id) {
  auto found = privatePools_.find(id);
  return found == privatePools_.end() ? nullptr : found->second.get();
}

Block* BlockPool::takeFree(size_t size, orStream_t stream, bool small, PrivatePool* pool) {
  FreeBlocks& free = freeSet(pool, small);
  Block key{device_, stream, size, nullptr, small};
  // The host may take any block of the stream: what it queues next runs after
  // every earlier use. A kernel is queued work itself, with work queued
  // behind it that may still use a block the host freed: it takes only
  // blocks freed once the work before it had been queued.
  const bool byKernel = insideKernel() && !faultInjected(AllocatorFault::KernelsIgnoreQueuedWork);
  std::optional<uint64_t> completed;
  for (auto found = free.lower_bound(&key); found != free.end() && (*found)->stream == stream;
       ++found) {
    if (byKernel) {
      if (!completed) completed = completedWork(stream);
      if ((*found)->freedAt > *completed) continue;
    }
    Block* block = *found;
    removeFree(block);
    return block;
  }
  return nullptr;
}

void BlockPool::waitForDeviceIdle(std::unique_lock<std::mutex>& lock) {
  // Cached blocks may still be used by queued work (stream-ordered reuse).
  // Inside a kernel the device cannot become idle (we are its work): skip.
  if (insideKernel()) return;
  lock.unlock();
  DeviceScope scope(device_);
  orError_t status = orSuccess;
  {
    // Queued work may need the GIL (a Python host function, autograd hooks),
    // and empty_cache or an allocation that retries after running out of
    // memory may be called holding it.
    GilReleasedIfHeld unlocked;
    status = orDeviceSynchronize();
  }
  // A synchronizing call: a failure of queued work is reported here (and the
  // lock stays released, as the exception leaves the allocator).
  OPENREG_CHECK(status);
  lock.lock();
}

bool BlockPool::overMemoryLimit(size_t segmentSize) const {
  const auto all = static_cast<size_t>(StatType::AGGREGATE);
  return memoryLimit_ != 0 &&
         static_cast<size_t>(stats_.reserved_bytes[all].current) + segmentSize > memoryLimit_;
}

// Null when the device is full or the memory fraction does not allow it.
void* BlockPool::tryMalloc(size_t segmentSize) {
  if (overMemoryLimit(segmentSize)) return nullptr;
  void* pointer = nullptr;
  const orError_t status = orMalloc(&pointer, segmentSize);
  if (status == orErrorOutOfMemory) {
    orGetLastError();
    return nullptr;
  }
  OPENREG_CHECK(status);
  return pointer;
}

void* BlockPool::mallocOrRetry(size_t segmentSize, std::unique_lock<std::mutex>& lock) {
  DeviceScope scope(device_);
  void* pointer = tryMalloc(segmentSize);
  if (pointer != nullptr) return pointer;
  // The cache may hold what is missing: give it back and try once more. Not
  // while the device captures a graph: that waits for the device (CUDA's
  // allocator skips it during capture too).
  if (deviceCapturing(device_)) {
    ++stats_.num_ooms;
    TORCH_CHECK_WITH(OutOfMemoryError, false, "openreg out of memory on device ",
                     static_cast<int>(device_), " while a graph is being captured: a new ",
                     humanBytes(segmentSize),
                     " segment does not fit, and the allocator cannot release its cached memory "
                     "during a capture (that waits for the device, as on CUDA). Free tensors or "
                     "call torch.openreg.empty_cache() before the capture, or capture less.");
  }
  if (insideKernel()) {
    releaseCacheFromKernel();
  } else {
    waitForDeviceIdle(lock);
    waitForPendingFrees(lock);
    collectSharedLocked();
    releaseFreeSegments(nullptr);
    releaseUnusedPools();
  }
  ++stats_.num_alloc_retries;
  return tryMalloc(segmentSize);
}

// A kernel cannot wait for the device (its own stream is busy running it), so
// it returns what no queued work can still use: blocks whose recorded streams
// are done, and segments whose blocks were all freed before the work still
// queued on their stream. The runtime orders a free made inside stream work
// at that work on its own stream (openreg.h, orFree), so the memory is free
// at once unless other streams' queued work precedes it.
void BlockPool::releaseCacheFromKernel() {
  collectPendingFrees();
  releaseFreeSegments(nullptr, /*onlyIdle=*/true);
  releaseUnusedPools(/*onlyIdle=*/true);
}

// use_on_oom pools lend a free block of theirs (it stays theirs).
Block* BlockPool::borrowFromPoolsForOom(size_t size, orStream_t stream, bool small) {
  for (auto& [id, pool] : privatePools_) {
    if (!pool->options.useOnOom || pool->useCount == 0) continue;
    if (Block* block = takeFree(size, stream, small, pool.get())) return block;
  }
  return nullptr;
}

// What the memory that is reserved but not in tensors is doing, when a kernel
// could not give it back: blocks freed while queued work may still use them.
std::string BlockPool::cachedForQueuedWork(size_t reserved, size_t inUse) const {
  if (!insideKernel() || reserved <= inUse) return "";
  return " This allocation was made by a kernel while it ran (a result whose size depends on "
         "the data, or a temporary), which cannot wait for the work queued on its stream: " +
         humanBytes(reserved - inUse) +
         " cached by the allocator is freed memory that queued work may still use, given back "
         "once that work has run. Synchronize before the call (torch.openreg.synchronize()) so "
         "the cache can be released,";
}

void BlockPool::throwOutOfMemory(size_t requested, size_t segmentSize) {
  size_t free = 0, total = 0;
  {
    DeviceScope scope(device_);
    succeeded(orMemGetInfo(&free, &total));
  }
  const auto all = static_cast<size_t>(StatType::AGGREGATE);
  const size_t reserved = static_cast<size_t>(stats_.reserved_bytes[all].current);
  const size_t inUse = static_cast<size_t>(stats_.allocated_bytes[all].current);
  const std::string cached = cachedForQueuedWork(reserved, inUse);
  const char* freeHint = cached.empty() ? " Free" : " free";
  notify(PoolAction::OutOfMemory, nullptr, requested, nullptr, nullptr);
  TORCH_CHECK_WITH(
      OutOfMemoryError, !overMemoryLimit(segmentSize), "openreg out of memory on device ",
      static_cast<int>(device_), ": tried to allocate ", humanBytes(requested), " (", requested,
      " bytes, in a ", humanBytes(segmentSize), " segment), but the per-process memory fraction ",
      memoryFraction_, " (torch.openreg.set_per_process_memory_fraction) allows this process ",
      humanBytes(memoryLimit_), " of the device's ", humanBytes(total), ", and ",
      humanBytes(reserved), " are reserved by the allocator (", humanBytes(inUse),
      " in use by tensors).", cached, freeHint,
      " tensors you no longer need, or raise the fraction.");
  TORCH_CHECK_WITH(OutOfMemoryError, false, "openreg out of memory on device ",
                   static_cast<int>(device_), ": tried to allocate ", humanBytes(requested), " (",
                   requested, " bytes, in a ", humanBytes(segmentSize), " segment); ",
                   humanBytes(inUse), " in use by tensors, ", humanBytes(reserved),
                   " reserved by the allocator, ", humanBytes(total), " capacity (",
                   humanBytes(free), " free).", cached, freeHint,
                   " tensors you no longer need, or raise OPENREG_DEVICE_MEMORY.");
}

Block* BlockPool::newSegment(size_t size, orStream_t stream, bool small, PrivatePool* pool,
                             std::unique_lock<std::mutex>& lock) {
  const size_t segmentSize = segmentSizeFor(size);
  void* pointer = mallocOrRetry(segmentSize, lock);
  if (pointer == nullptr) {
    if (pool == nullptr) {
      if (Block* borrowed = borrowFromPoolsForOom(size, stream, small)) return borrowed;
    }
    ++stats_.num_ooms;
    throwOutOfMemory(size, segmentSize);
  }
  markDeviceUsed(device_);
  ++stats_.num_device_alloc;
  updateStat(stats_.segment, small, 1);
  updateReserved(pool, small, static_cast<int64_t>(segmentSize));
  auto* block = new Block{device_, stream, segmentSize, pointer, small};
  block->pool = pool;
  if (pool != nullptr) ++pool->segments;
  return block;
}

void BlockPool::updateReserved(PrivatePool* pool, bool small, int64_t delta) {
  updateStat(stats_.reserved_bytes, small, delta);
  if (pool != nullptr) updateStat(stats_.reserved_bytes_by_private_pools[pool->id], small, delta);
}

void BlockPool::splitIfWorthIt(Block* block, size_t size) {
  const size_t remaining = block->size - size;
  const bool worthIt = block->small ? remaining >= kRounding : remaining > kSmallRequest;
  if (!worthIt) return;
  auto* rest = new Block{device_, block->stream, remaining,
                         static_cast<char*>(block->pointer) + size, block->small};
  rest->pool = block->pool;
  rest->freedAt = block->freedAt;
  rest->settling = block->settling;
  rest->previous = block;
  rest->next = block->next;
  if (block->next != nullptr) block->next->previous = rest;
  block->next = rest;
  block->size = size;
  insertFree(rest);
}

void BlockPool::insertFree(Block* block) {
  freeSet(block->pool, block->small).insert(block);
  if (block->settling) settling_.insert(block);
  if (!wholeSegment(block)) {
    updateStat(stats_.inactive_split, block->small, 1);
    updateStat(stats_.inactive_split_bytes, block->small, static_cast<int64_t>(block->size));
  }
}

void BlockPool::removeFree(Block* block) {
  freeSet(block->pool, block->small).erase(block);
  if (block->settling) settling_.erase(block);
  if (!wholeSegment(block)) {
    updateStat(stats_.inactive_split, block->small, -1);
    updateStat(stats_.inactive_split_bytes, block->small, -static_cast<int64_t>(block->size));
  }
}

// Merged free blocks keep the later of their free points. A block still
// settling merges only with settling neighbours: merged into a settled one,
// it would keep kernels away from the whole block until its own work ran.
Block* BlockPool::mergeWithNeighbours(Block* block) {
  auto mergeable = [block](const Block* neighbour) {
    return neighbour != nullptr && isFree(*neighbour) && neighbour->settling == block->settling;
  };
  if (Block* next = block->next; mergeable(next)) {
    removeFree(next);
    block->size += next->size;
    block->freedAt = std::max(block->freedAt, next->freedAt);
    block->next = next->next;
    if (next->next != nullptr) next->next->previous = block;
    delete next;
  }
  if (Block* previous = block->previous; mergeable(previous)) {
    removeFree(previous);
    previous->size += block->size;
    previous->freedAt = std::max(previous->freedAt, block->freedAt);
    previous->next = block->next;
    if (block->next != nullptr) block->next->previous = previous;
    delete block;
    block = previous;
  }
  return block;
}

void BlockPool::free(Block* block) {
  if (block->shared && holdForOtherProcesses(block)) return;
  const auto context = observerContext(false);
  const auto lock = lockBriefly(mutex_);
  freeLocked(block, context);
}

void BlockPool::freeLocked(Block* block, const std::shared_ptr<c10::GatheredContext>& context) {
  allocated_.erase(block->pointer);
  // As CUDA counts it: the tensor's bytes stop being allocated now; the block
  // stays active until it is back in the pool.
  updateStat(stats_.allocation, block->small, -1);
  updateStat(stats_.allocated_bytes, block->small, -static_cast<int64_t>(block->size));
  block->allocated = false;
  notify(PoolAction::FreeRequested, block->pointer, block->size, block->stream, context);
  if (faultInjected(AllocatorFault::IgnoreRecordedStreams)) block->streamUses.clear();
  if (block->streamUses.empty()) {
    returnToPool(block, context);
  } else {
    deferFree(block);
  }
}

void BlockPool::returnToPool(Block* block, const std::shared_ptr<c10::GatheredContext>& context) {
  updateStat(stats_.active, block->small, -1);
  updateStat(stats_.active_bytes, block->small, -static_cast<int64_t>(block->size));
  updateStat(stats_.requested_bytes, block->small, -static_cast<int64_t>(block->requested));
  block->requested = 0;
  const FreePoint point = freePointOf(block->stream);
  block->freedAt = point.freedAt;
  block->settling = !point.settled;
  notify(PoolAction::Free, block->pointer, block->size, block->stream, context);
  insertFree(mergeWithNeighbours(block));
}

void BlockPool::settleFreedBlocks() {
  if (settling_.empty()) return;
  // Asked once per stream; this runs at every allocation while blocks settle,
  // so nothing here allocates in the common case (a stream or two).
  c10::SmallVector<std::pair<orStream_t, uint64_t>, 4> completed;
  c10::SmallVector<Block*, 16> settled;
  for (Block* block : settling_) {
    auto known = std::find_if(completed.begin(), completed.end(),
                              [&](const auto& entry) { return entry.first == block->stream; });
    if (known == completed.end()) {
      completed.emplace_back(block->stream, completedWork(block->stream));
      known = completed.end() - 1;
    }
    if (block->freedAt <= known->second) settled.push_back(block);
  }
  // A block merges only into settled neighbours, which these are not yet: none
  // of them is deleted by another's merge before its turn.
  for (Block* block : settled) {
    removeFree(block);
    block->settling = false;
    insertFree(mergeWithNeighbours(block));
  }
}

Block* BlockPool::find(void* pointer) {
  const auto lock = lockBriefly(mutex_);
  auto found = allocated_.find(pointer);
  TORCH_CHECK(found != allocated_.end(), "openreg: ", pointer,
              " is not an allocated block of device ", static_cast<int>(device_));
  return found->second;
}

std::vector<Block*> BlockPool::takeUnusedSegments(PrivatePool* pool, bool onlyIdle) {
  // A segment can go when all its blocks are free (and, with onlyIdle, were
  // freed before the work now running on its stream). Its blocks are found
  // from its first one, and walked in full.
  std::vector<Block*> heads;
  for (FreeBlocks* free : {&freeSet(pool, true), &freeSet(pool, false)}) {
    for (Block* block : *free) {
      if (block->previous == nullptr) heads.push_back(block);
    }
  }
  std::vector<Block*> unusedSegments;
  for (Block* head : heads) {
    bool unused = true;
    size_t segmentSize = 0;
    uint64_t freedAt = 0;
    for (Block* block = head; block != nullptr; block = block->next) {
      unused = unused && isFree(*block);
      segmentSize += block->size;
      freedAt = std::max(freedAt, block->freedAt);
    }
    if (!unused || (onlyIdle && freedAt > completedWork(head->stream))) continue;
    for (Block* block = head; block != nullptr;) {
      Block* next = block->next;
      removeFree(block);
      if (block != head) delete block;
      block = next;
    }
    ++stats_.num_device_free;
    updateStat(stats_.segment, head->small, -1);
    updateReserved(pool, head->small, -static_cast<int64_t>(segmentSize));
    if (pool != nullptr) --pool->segments;
    notify(PoolAction::SegmentFree, head->pointer, segmentSize, head->stream, nullptr);
    head->size = segmentSize;
    head->next = nullptr;
    unusedSegments.push_back(head);
  }
  return unusedSegments;
}

void BlockPool::releaseFreeSegments(PrivatePool* pool, bool onlyIdle) {
  for (Block* segment : takeUnusedSegments(pool, onlyIdle)) {
    succeeded(orFree(segment->pointer));
    delete segment;
  }
}

// Pools nobody uses any more: their cached segments go, and the pool with them
// once it holds none (blocks still allocated keep it until they are freed).
void BlockPool::releaseUnusedPools(bool onlyIdle) {
  for (auto entry = privatePools_.begin(); entry != privatePools_.end();) {
    PrivatePool* pool = entry->second.get();
    if (pool->useCount == 0) releaseFreeSegments(pool, onlyIdle);
    entry = pool->useCount == 0 && pool->segments == 0 ? forgetPool(entry) : std::next(entry);
  }
}

BlockPool::PrivatePools::iterator BlockPool::forgetPool(PrivatePools::iterator entry) {
  stats_.reserved_bytes_by_private_pools.erase(entry->first);
  return privatePools_.erase(entry);
}

void BlockPool::emptyCache(PoolId id) {
  if (heldCount_.load(std::memory_order_relaxed) != 0) collectShared();
  auto lock = lockBriefly(mutex_);
  waitForDeviceIdle(lock);
  waitForPendingFrees(lock);
  if (id == kDefaultPool) {
    releaseFreeSegments(nullptr);
    releaseUnusedPools();
    return;
  }
  auto entry = privatePools_.find(id);
  if (entry == privatePools_.end()) return;
  PrivatePool* pool = entry->second.get();
  releaseFreeSegments(pool);
  if (pool->useCount == 0 && pool->segments == 0) forgetPool(entry);
}

void BlockPool::retainPool(PoolId id, PoolOptions options) {
  const auto lock = lockBriefly(mutex_);
  std::unique_ptr<PrivatePool>& pool = privatePools_[id];
  if (pool == nullptr) pool = std::make_unique<PrivatePool>(PrivatePool{id, options});
  ++pool->useCount;
}

void BlockPool::releasePool(PoolId id) noexcept {
  const auto lock = lockBriefly(mutex_);
  PrivatePool* pool = findPool(id);
  if (pool != nullptr && pool->useCount > 0) --pool->useCount;
}

void BlockPool::returnPoolMemory(PoolId id) {
  std::vector<Block*> segments;
  {
    const auto lock = lockBriefly(mutex_);
    auto entry = privatePools_.find(id);
    if (entry == privatePools_.end() || entry->second->useCount > 0) return;
    segments = takeUnusedSegments(entry->second.get());
    if (entry->second->segments == 0) forgetPool(entry);
  }
  // orFree is stream-ordered (the memory is reused only after the work queued
  // before it completes), so this neither waits nor races with queued kernels.
  for (Block* segment : segments) {
    succeeded(orFree(segment->pointer));
    delete segment;
  }
}

int BlockPool::poolUseCount(PoolId id) {
  const auto lock = lockBriefly(mutex_);
  PrivatePool* pool = findPool(id);
  return pool == nullptr ? 0 : pool->useCount;
}

void BlockPool::setMemoryFraction(double fraction) {
  size_t free = 0, total = 0;
  {
    DeviceScope scope(device_);
    OPENREG_CHECK(orMemGetInfo(&free, &total));
  }
  const auto lock = lockBriefly(mutex_);
  memoryFraction_ = fraction;
  // At least one byte: a fraction of 0 allows nothing (0 means "no limit").
  memoryLimit_ = std::max<size_t>(1, static_cast<size_t>(fraction * static_cast<double>(total)));
}

double BlockPool::memoryFraction() {
  const auto lock = lockBriefly(mutex_);
  return memoryFraction_;
}

c10::CachingDeviceAllocator::DeviceStats BlockPool::stats() {
  const auto lock = lockBriefly(mutex_);
  return stats_;
}

void BlockPool::resetAccumulatedStats() {
  const auto lock = lockBriefly(mutex_);
  forEachStat(stats_, [](c10::CachingAllocator::Stat& stat) { stat.reset_accumulated(); });
  stats_.num_alloc_retries = 0;
  stats_.num_ooms = 0;
  stats_.num_device_alloc = 0;
  stats_.num_device_free = 0;
}

void BlockPool::resetPeakStats() {
  const auto lock = lockBriefly(mutex_);
  forEachStat(stats_, [](c10::CachingAllocator::Stat& stat) { stat.reset_peak(); });
}

void setAllocatorFault(AllocatorFault fault) {
  injectedFault.store(fault, std::memory_order_relaxed);
}

void beginAllocateToPool(c10::DeviceIndex device, PoolId id) {
  threadRoutes.emplace_back(device, id);
}

void endAllocateToPool(c10::DeviceIndex device, PoolId id) {
  for (auto route = threadRoutes.rbegin(); route != threadRoutes.rend(); ++route) {
    if (route->first == device && route->second == id) {
      threadRoutes.erase(std::next(route).base());
      return;
    }
  }
  TORCH_CHECK(false, "openreg: this thread is not allocating to memory pool (", id.first, ", ",
              id.second, ") on device ", static_cast<int>(device), " (end without begin)");
}

PoolRoutes currentPoolRoutes() { return threadRoutes; }

PoolRoutesScope::PoolRoutesScope(PoolRoutes routes)
    : saved_(std::exchange(threadRoutes, std::move(routes))) {}

PoolRoutesScope::~PoolRoutesScope() { threadRoutes = std::move(saved_); }

// ---- Observing the pool ------------------------------------------------------

void setPoolObserver(const PoolObserver* observer) {
  poolObserver.store(observer, std::memory_order_release);
}

void BlockPool::notify(PoolAction action, void* address, size_t size, orStream_t stream,
                       const std::shared_ptr<c10::GatheredContext>& context) {
  const PoolObserver* observer = poolObserver.load(std::memory_order_acquire);
  if (observer == nullptr) return;
  const auto all = static_cast<size_t>(StatType::AGGREGATE);
  observer->observe(PoolEvent{action, device_, address, size, stream,
                              static_cast<size_t>(stats_.allocated_bytes[all].current),
                              static_cast<size_t>(stats_.reserved_bytes[all].current)},
                    context);
}

std::vector<SegmentView> BlockPool::segments() {
  const auto lock = lockBriefly(mutex_);
  // Every block is allocated, waiting for its recorded streams, or free; a
  // segment starts at a block without a previous neighbour.
  std::vector<const Block*> heads;
  auto noteHead = [&heads](const Block* block) {
    if (block->previous == nullptr) heads.push_back(block);
  };
  for (const auto& entry : allocated_) noteHead(entry.second);
  for (const PendingFree& pending : pendingFrees_) noteHead(pending.block);
  std::vector<const FreeBlocks*> freeLists{&freeSmall_, &freeLarge_};
  for (const auto& entry : privatePools_) {
    freeLists.push_back(&entry.second->freeSmall);
    freeLists.push_back(&entry.second->freeLarge);
  }
  for (const FreeBlocks* list : freeLists) {
    for (const Block* block : *list) noteHead(block);
  }
  std::sort(heads.begin(), heads.end(),
            [](const Block* a, const Block* b) { return a->pointer < b->pointer; });
  std::vector<SegmentView> views;
  for (const Block* head : heads) {
    SegmentView view{head->pointer, 0, head->stream, head->small, {}};
    for (const Block* block = head; block != nullptr; block = block->next) {
      view.size += block->size;
      const auto state = block->allocated ? SegmentView::State::Allocated
                         : isFree(*block) ? SegmentView::State::Free
                                          : SegmentView::State::PendingFree;
      view.blocks.push_back({block->pointer, block->size, block->requested, state});
    }
    views.push_back(std::move(view));
  }
  return views;
}

BlockPool& blockPool(c10::DeviceIndex device) {
  // Never destroyed: stream workers may still free blocks while the process exits.
  static auto* once = new std::array<std::once_flag, OPENREG_MAX_DEVICES>();
  static auto* pools = new std::array<BlockPool*, OPENREG_MAX_DEVICES>();
  std::call_once((*once)[device], [device] { (*pools)[device] = new BlockPool(device); });
  return *(*pools)[device];
}

}  // namespace torch_openreg
