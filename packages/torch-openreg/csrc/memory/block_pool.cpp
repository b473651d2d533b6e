// block_pool.cpp — size classes, splitting, merging, per-stream reuse, OOM retry.
#include "memory/block_pool.h"

#include <c10/util/Exception.h>

#include <array>
#include <cstring>
#include <iomanip>
#include <memory>
#include <sstream>

#include "base/debug_modes.h"
#include "base/device.h"
#include "base/kernel_thread.h"
#include "base/runtime_check.h"

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

std::string humanBytes(size_t bytes) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(2);
  if (bytes >= (size_t{1} << 30)) {
    text << static_cast<double>(bytes) / (1 << 30) << " GiB";
  } else if (bytes >= (size_t{1} << 20)) {
    text << static_cast<double>(bytes) / (1 << 20) << " MiB";
  } else {
    text << bytes << " bytes";
  }
  return text.str();
}

// OPENREG_DEBUG=poison: every block handed out is filled with kPoisonByte
// first, so reading memory nobody wrote gives NaN / -1 on every run. The fill
// is stream work on the block's stream, queued before anything the caller
// enqueues with the new tensor: it runs after every earlier use of the block
// on that stream (stream-ordered reuse), never under a kernel still reading
// it. A block allocated inside a kernel is filled at once: that kernel is the
// stream's running work.
void poison(const Block& block) {
  if (insideKernel()) {
    void* kernelView = nullptr;
    OPENREG_CHECK(orGetKernelPointer(&kernelView, block.pointer));
    std::memset(kernelView, kPoisonByte, block.size);
    return;
  }
  DeviceScope scope(block.device);
  OPENREG_CHECK(orMemsetAsync(block.pointer, kPoisonByte, block.size, block.stream));
}

bool wholeSegment(const Block* block) { return block->previous == nullptr && block->next == nullptr; }

template <typename Visit>
void forEachStat(c10::CachingDeviceAllocator::DeviceStats& stats, Visit&& visit) {
  for (auto* array : {&stats.allocation, &stats.segment, &stats.active, &stats.inactive_split,
                      &stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes,
                      &stats.inactive_split_bytes, &stats.requested_bytes}) {
    for (auto& stat : *array) visit(stat);
  }
}

}  // namespace

bool BlockPool::ByStreamAndSize::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->kernelPool != b->kernelPool) return a->kernelPool < b->kernelPool;
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
  std::unique_lock<std::mutex> lock(mutex_);
  Block* block = takeFree(size, stream, small);
  if (block == nullptr) block = newSegment(size, stream, small, lock);
  splitIfWorthIt(block, size);
  block->allocated = true;
  block->requested = bytes;
  allocated_.emplace(block->pointer, block);
  for (auto* stat : {&stats_.allocation, &stats_.active}) updateStat(*stat, small, 1);
  for (auto* stat : {&stats_.allocated_bytes, &stats_.active_bytes}) {
    updateStat(*stat, small, static_cast<int64_t>(block->size));
  }
  updateStat(stats_.requested_bytes, small, static_cast<int64_t>(bytes));
  lock.unlock();  // the fill may wait for queue space on the worker
  if (debugModeOn(kDebugPoison)) poison(*block);
  return block;
}

Block* BlockPool::takeFree(size_t size, orStream_t stream, bool small) {
  FreeBlocks& pool = poolFor(small);
  Block key{device_, stream, size, nullptr, small, insideKernel()};
  auto found = pool.lower_bound(&key);
  if (found == pool.end() || (*found)->stream != stream || (*found)->kernelPool != key.kernelPool) {
    return nullptr;
  }
  Block* block = *found;
  removeFree(block);
  return block;
}

void BlockPool::waitForDeviceIdle(std::unique_lock<std::mutex>& lock) {
  // Cached blocks may still be used by queued work (stream-ordered reuse).
  // Inside a kernel the device cannot become idle (we are its work): skip.
  if (insideKernel()) return;
  lock.unlock();
  DeviceScope scope(device_);
  // A synchronizing call: a failure of queued work is reported here (and the
  // lock stays released, as the exception leaves the allocator).
  OPENREG_CHECK(orDeviceSynchronize());
  lock.lock();
}

void* BlockPool::mallocOrRetry(size_t segmentSize, size_t requested,
                               std::unique_lock<std::mutex>& lock) {
  DeviceScope scope(device_);
  void* pointer = nullptr;
  orError_t status = orMalloc(&pointer, segmentSize);
  if (status == orErrorOutOfMemory && !insideKernel()) {
    // The cache may hold what is missing: give it back and try once more.
    orGetLastError();
    waitForDeviceIdle(lock);
    releaseFreeSegments();
    ++stats_.num_alloc_retries;
    status = orMalloc(&pointer, segmentSize);
  }
  if (status == orErrorOutOfMemory) {
    orGetLastError();
    ++stats_.num_ooms;
    throwOutOfMemory(requested, segmentSize);
  }
  OPENREG_CHECK(status);
  return pointer;
}

void BlockPool::throwOutOfMemory(size_t requested, size_t segmentSize) {
  size_t free = 0, total = 0;
  {
    DeviceScope scope(device_);
    succeeded(orMemGetInfo(&free, &total));
  }
  const auto all = static_cast<size_t>(StatType::AGGREGATE);
  TORCH_CHECK_WITH(OutOfMemoryError, false, "openreg out of memory on device ", static_cast<int>(device_),
                   ": tried to allocate ", humanBytes(requested), " (", requested, " bytes, in a ",
                   humanBytes(segmentSize), " segment); ", humanBytes(static_cast<size_t>(stats_.allocated_bytes[all].current)),
                   " in use by tensors, ", humanBytes(static_cast<size_t>(stats_.reserved_bytes[all].current)),
                   " reserved by the allocator, ", humanBytes(total), " capacity (", humanBytes(free),
                   " free). Free tensors you no longer need, or raise OPENREG_DEVICE_MEMORY.");
}

Block* BlockPool::newSegment(size_t size, orStream_t stream, bool small,
                             std::unique_lock<std::mutex>& lock) {
  const size_t segmentSize = segmentSizeFor(size);
  void* pointer = mallocOrRetry(segmentSize, size, lock);
  markDeviceUsed(device_);
  ++stats_.num_device_alloc;
  updateStat(stats_.segment, small, 1);
  updateStat(stats_.reserved_bytes, small, static_cast<int64_t>(segmentSize));
  return new Block{device_, stream, segmentSize, pointer, small, insideKernel()};
}

void BlockPool::splitIfWorthIt(Block* block, size_t size) {
  const size_t remaining = block->size - size;
  const bool worthIt = block->small ? remaining >= kRounding : remaining > kSmallRequest;
  if (!worthIt) return;
  auto* rest = new Block{device_, block->stream, remaining, static_cast<char*>(block->pointer) + size,
                         block->small, block->kernelPool};
  rest->previous = block;
  rest->next = block->next;
  if (block->next != nullptr) block->next->previous = rest;
  block->next = rest;
  block->size = size;
  insertFree(rest);
}

void BlockPool::insertFree(Block* block) {
  poolFor(block->small).insert(block);
  if (!wholeSegment(block)) {
    updateStat(stats_.inactive_split, block->small, 1);
    updateStat(stats_.inactive_split_bytes, block->small, static_cast<int64_t>(block->size));
  }
}

void BlockPool::removeFree(Block* block) {
  poolFor(block->small).erase(block);
  if (!wholeSegment(block)) {
    updateStat(stats_.inactive_split, block->small, -1);
    updateStat(stats_.inactive_split_bytes, block->small, -static_cast<int64_t>(block->size));
  }
}

Block* BlockPool::mergeWithNeighbours(Block* block) {
  auto mergeable = [block](const Block* neighbour) {
    return neighbour != nullptr && !neighbour->allocated && neighbour->kernelPool == block->kernelPool;
  };
  if (Block* next = block->next; mergeable(next)) {
    removeFree(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->previous = block;
    delete next;
  }
  if (Block* previous = block->previous; mergeable(previous)) {
    removeFree(previous);
    previous->size += block->size;
    previous->next = block->next;
    if (block->next != nullptr) block->next->previous = previous;
    delete block;
    block = previous;
  }
  return block;
}

void BlockPool::release(Block* block) {
  std::lock_guard<std::mutex> lock(mutex_);
  allocated_.erase(block->pointer);
  for (auto* stat : {&stats_.allocation, &stats_.active}) updateStat(*stat, block->small, -1);
  for (auto* stat : {&stats_.allocated_bytes, &stats_.active_bytes}) {
    updateStat(*stat, block->small, -static_cast<int64_t>(block->size));
  }
  updateStat(stats_.requested_bytes, block->small, -static_cast<int64_t>(block->requested));
  block->allocated = false;
  block->requested = 0;
  block->kernelPool = insideKernel();  // freed by the host: stream order protects it
  insertFree(mergeWithNeighbours(block));
}

Block* BlockPool::find(void* pointer) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = allocated_.find(pointer);
  TORCH_CHECK(found != allocated_.end(), "openreg: ", pointer,
              " is not an allocated block of device ", static_cast<int>(device_));
  return found->second;
}

void BlockPool::recordUse(Block* block, orStream_t stream, orEvent_t event) {
  std::lock_guard<std::mutex> lock(mutex_);
  block->recordedUses.emplace_back(stream, event);
}

std::vector<std::pair<orStream_t, orEvent_t>> BlockPool::takePendingUses(Block* block) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::pair<orStream_t, orEvent_t>> pending;
  for (const auto& [stream, event] : block->recordedUses) {
    if (succeeded(orEventQuery(event))) {
      succeeded(orEventDestroy(event));
    } else {
      pending.emplace_back(stream, event);
    }
  }
  block->recordedUses.clear();
  return pending;
}

void BlockPool::releaseFreeSegments() {
  // A segment can go when none of its blocks is allocated. Its free blocks may
  // sit in different pools (host-freed and kernel-private blocks never merge),
  // so segments are found from their first block and walked in full.
  std::vector<Block*> heads;
  for (FreeBlocks* pool : {&freeSmall_, &freeLarge_}) {
    for (Block* block : *pool) {
      if (block->previous == nullptr) heads.push_back(block);
    }
  }
  for (Block* head : heads) {
    bool unused = true;
    size_t segmentSize = 0;
    for (Block* block = head; block != nullptr; block = block->next) {
      unused = unused && !block->allocated;
      segmentSize += block->size;
    }
    if (!unused) continue;
    const bool small = head->small;
    for (Block* block = head; block != nullptr;) {
      Block* next = block->next;
      removeFree(block);
      if (block != head) delete block;
      block = next;
    }
    succeeded(orFree(head->pointer));
    ++stats_.num_device_free;
    updateStat(stats_.segment, small, -1);
    updateStat(stats_.reserved_bytes, small, -static_cast<int64_t>(segmentSize));
    delete head;
  }
}

void BlockPool::emptyCache() {
  std::unique_lock<std::mutex> lock(mutex_);
  waitForDeviceIdle(lock);
  releaseFreeSegments();
}

c10::CachingDeviceAllocator::DeviceStats BlockPool::stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void BlockPool::resetAccumulatedStats() {
  std::lock_guard<std::mutex> lock(mutex_);
  forEachStat(stats_, [](c10::CachingAllocator::Stat& stat) { stat.reset_accumulated(); });
  stats_.num_alloc_retries = 0;
  stats_.num_ooms = 0;
  stats_.num_device_alloc = 0;
  stats_.num_device_free = 0;
}

void BlockPool::resetPeakStats() {
  std::lock_guard<std::mutex> lock(mutex_);
  forEachStat(stats_, [](c10::CachingAllocator::Stat& stat) { stat.reset_peak(); });
}

BlockPool& blockPool(c10::DeviceIndex device) {
  // Never destroyed: stream workers may still free blocks while the process exits.
  static auto* once = new std::array<std::once_flag, OPENREG_MAX_DEVICES>();
  static auto* pools = new std::array<BlockPool*, OPENREG_MAX_DEVICES>();
  std::call_once((*once)[device], [device] { (*pools)[device] = new BlockPool(device); });
  return *(*pools)[device];
}

}  // namespace torch_openreg
