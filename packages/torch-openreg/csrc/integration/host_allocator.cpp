// host_allocator.cpp — cached orMallocHost blocks with host stats.
//
// Sizes round up to a power of two (at least one page) and freed blocks wait
// in a free list per size for the next request, as in CUDA's host caching
// allocator: pinned allocations are expensive and pinned buffers are usually
// reused with the same sizes. empty_cache() returns the free ones. Statistics
// are at::HostStats, as torch.cuda.host_memory_stats reports them: blocks and
// bytes owned (allocations) and handed out (active), runtime calls and the
// time they took.
//
// Reuse follows CUDA's contract too. This backend's own copies keep the host
// tensors they read or write alive until they have run, so their memory is
// never reused under them; code that uses a pinned block on a stream without
// such a reference declares it with record_event (at::HostAllocator, what
// CUDA's copy kernels call): the stream is remembered, an event is recorded
// on it when the block is freed, and the block returns to its free list once
// the event has completed.
#include "integration/host_allocator.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/byte_units.h"
#include "base/debug_modes.h"
#include "base/device.h"
#include "base/gil.h"
#include "base/runtime_check.h"
#include "integration/stream.h"

namespace torch_openreg {
namespace {

constexpr size_t kMinimumBlock = 4096;

struct PinnedBlock {
  void* pointer;
  size_t size;       // rounded size of the runtime allocation
  size_t requested;  // bytes asked for by the current user
  std::vector<orStream_t> streams;  // recorded with record_event since it was handed out
};

// An event on each recorded stream, marking the work queued there when the
// block was freed (null where none could be recorded: the stream's idleness
// counts instead).
struct PendingPinned {
  PinnedBlock* block;
  std::vector<orEvent_t> events;
};

bool passed(const PendingPinned& pending) {
  for (size_t i = 0; i < pending.events.size(); ++i) {
    orEvent_t event = pending.events[i];
    const bool done = event != nullptr ? succeeded(orEventQuery(event))
                                       : succeeded(orStreamQuery(pending.block->streams[i]));
    if (!done) return false;
  }
  return true;
}

// The host's memory as /proc/meminfo counts it (0 if unknown).
std::pair<size_t, size_t> hostMemory() {
  const long pages = sysconf(_SC_PHYS_PAGES), available = sysconf(_SC_AVPHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || available < 0 || page <= 0) return {0, 0};
  return {static_cast<size_t>(pages) * static_cast<size_t>(page),
          static_cast<size_t>(available) * static_cast<size_t>(page)};
}

// Microseconds `call` takes (what HostStats' duration statistics count).
template <typename Call>
int64_t timedMicroseconds(Call&& call) {
  const auto start = std::chrono::steady_clock::now();
  call();
  const auto elapsed = std::chrono::steady_clock::now() - start;
  return std::chrono::duration_cast<std::chrono::microseconds>(elapsed).count();
}

size_t roundToPowerOfTwo(size_t bytes) {
  size_t size = kMinimumBlock;
  while (size < bytes) size <<= 1;
  return size;
}

class HostCache {
 public:
  PinnedBlock* take(size_t bytes) {
    const size_t size = roundToPowerOfTwo(bytes);
    PinnedBlock* block = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      collectPassed();
      auto& free = freeBySize_[size];
      if (!free.empty()) {
        block = free.back();
        free.pop_back();
      }
    }
    if (block == nullptr) block = allocateNew(size, bytes);
    block->requested = bytes;
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.active_requests.increase(1);
    stats_.active_bytes.increase(block->size);
    handedOut_.emplace(block->pointer, block);
    return block;
  }

  // False if `pointer` is not the start of a pinned block in use.
  bool recordStream(void* pointer, orStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = handedOut_.find(pointer);
    if (found == handedOut_.end()) return false;
    auto& streams = found->second->streams;
    if (std::find(streams.begin(), streams.end(), stream) == streams.end())
      streams.push_back(stream);
    return true;
  }

  void giveBack(PinnedBlock* block) {
    std::lock_guard<std::mutex> lock(mutex_);
    handedOut_.erase(block->pointer);
    stats_.active_requests.decrease(1);
    stats_.active_bytes.decrease(block->size);
    if (block->streams.empty()) {
      freeBySize_[block->size].push_back(block);
      return;
    }
    PendingPinned pending{block, {}};
    for (orStream_t stream : block->streams) pending.events.push_back(recordEventOrNull(stream));
    pending_.push_back(std::move(pending));
  }

  void empty() {
    waitForPending();
    std::lock_guard<std::mutex> lock(mutex_);
    collectPassed();
    releaseFree();
  }

  at::HostStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  // Totals (allocated/freed, call counts and times) start again from zero.
  void resetAccumulated() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto* stat : counts()) stat->reset_accumulated();
    for (auto* duration : {&stats_.host_alloc_time, &stats_.host_free_time})
      duration->reset_accumulated();
    stats_.num_host_alloc = 0;
    stats_.num_host_free = 0;
  }

  // Peaks become the current values; the slowest/fastest call is forgotten.
  void resetPeaks() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto* stat : counts()) stat->reset_peak();
    for (auto* duration : {&stats_.host_alloc_time, &stats_.host_free_time}) duration->reset_peak();
  }

 private:
  std::array<c10::CachingAllocator::Stat*, 4> counts() {
    return {&stats_.active_requests, &stats_.allocations, &stats_.active_bytes,
            &stats_.allocated_bytes};
  }

  PinnedBlock* allocateNew(size_t size, size_t requested) {
    void* pointer = nullptr;
    orError_t status = orSuccess;
    const int64_t microseconds = timedMicroseconds([&] { status = orMallocHost(&pointer, size); });
    if (status == orErrorOutOfMemory) {
      orGetLastError();
      // The cache may hold what is missing: give it back and try once more.
      empty();
      status = orMallocHost(&pointer, size);
      if (status == orErrorOutOfMemory) {
        orGetLastError();
        throwOutOfMemory(requested, size);
      }
    }
    OPENREG_CHECK(status);
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.host_alloc_time.increase(microseconds);
    stats_.allocations.increase(1);
    stats_.allocated_bytes.increase(size);
    ++stats_.num_host_alloc;
    return new PinnedBlock{pointer, size, 0, {}};
  }

  [[noreturn]] void throwOutOfMemory(size_t requested, size_t size) {
    const auto [total, available] = hostMemory();
    at::HostStats stats = this->stats();
    TORCH_CHECK_WITH(
        OutOfMemoryError, false, "openreg out of pinned host memory: tried to allocate ",
        humanBytes(requested), " (", requested, " bytes, in a ", humanBytes(size),
        " pinned block); the host has ", humanBytes(total), " of memory (", humanBytes(available),
        " available), and ", humanBytes(static_cast<size_t>(stats.allocated_bytes.current)),
        " are pinned by openreg's host allocator (",
        humanBytes(static_cast<size_t>(stats.active_bytes.current)),
        " in pinned tensors). Free pinned tensors you no longer need, pin smaller buffers "
        "(e.g. smaller batches), or use pageable memory (pin_memory=False).");
  }

  // Blocks whose recorded streams have completed their work go back to their
  // free lists. Called with the lock held.
  void collectPassed() {
    auto stillPending = std::stable_partition(pending_.begin(), pending_.end(),
                                              [](const PendingPinned& p) { return !passed(p); });
    for (auto entry = stillPending; entry != pending_.end(); ++entry) {
      for (orEvent_t event : entry->events) {
        if (event != nullptr) orEventDestroy(event);
      }
      entry->block->streams.clear();
      freeBySize_[entry->block->size].push_back(entry->block);
    }
    pending_.erase(stillPending, pending_.end());
  }

  // Waits (without the lock or the GIL) for the work pending frees wait for.
  void waitForPending() {
    std::vector<orStream_t> streams;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const PendingPinned& pending : pending_) {
        streams.insert(streams.end(), pending.block->streams.begin(), pending.block->streams.end());
      }
    }
    GilReleasedIfHeld unlocked;
    for (orStream_t stream : streams) succeeded(orStreamSynchronize(stream));
  }

  // Returns every free block to the runtime. Called with the lock held.
  void releaseFree() {
    for (auto& [size, blocks] : freeBySize_) {
      for (PinnedBlock* block : blocks) {
        stats_.host_free_time.increase(
            timedMicroseconds([&] { succeeded(orFreeHost(block->pointer)); }));
        stats_.allocations.decrease(1);
        stats_.allocated_bytes.decrease(block->size);
        ++stats_.num_host_free;
        delete block;
      }
      blocks.clear();
    }
  }

  std::mutex mutex_;
  std::map<size_t, std::vector<PinnedBlock*>> freeBySize_;
  std::vector<PendingPinned> pending_;
  std::unordered_map<void*, PinnedBlock*> handedOut_;
  at::HostStats stats_;
};

HostCache& cache() {
  static auto* instance = new HostCache();  // never destroyed: frees may come late at exit
  return *instance;
}

void freePinned(void* context) { cache().giveBack(static_cast<PinnedBlock*>(context)); }

}  // namespace

c10::DataPtr HostAllocator::allocate(size_t nbytes) {
  const c10::Device cpu(c10::DeviceType::CPU);
  if (nbytes == 0) return c10::DataPtr(nullptr, cpu);
  PinnedBlock* block = cache().take(nbytes);
  // OPENREG_DEBUG=poison: pinned memory nobody wrote reads as NaN / -1 too. A
  // block is free only once no queued copy holds it, so the host may fill it.
  if (debugModeOn(kDebugPoison)) std::memset(block->pointer, kPoisonByte, block->size);
  return c10::DataPtr(block->pointer, block, &freePinned, cpu);
}

c10::DeleterFnPtr HostAllocator::raw_deleter() const { return &freePinned; }

void HostAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

bool HostAllocator::record_event(void* ptr, void* /*ctx*/, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "openreg's pinned memory can record only openreg streams, got a ",
              stream.device_type(), " stream");
  return cache().recordStream(ptr, nativeHandle(stream));
}

void HostAllocator::empty_cache() { cache().empty(); }

at::HostStats HostAllocator::get_stats() { return cache().stats(); }

void HostAllocator::reset_accumulated_stats() { cache().resetAccumulated(); }

void HostAllocator::reset_peak_stats() { cache().resetPeaks(); }

bool HostAllocator::isPinned(const void* pointer) {
  orPointerAttributes attributes{};
  if (!succeeded(orPointerGetAttributes(&attributes, pointer))) return false;
  return attributes.type == orMemoryTypeHost;
}

HostAllocator& hostAllocator() {
  static HostAllocator* allocator = new HostAllocator();
  return *allocator;
}

REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &hostAllocator())

}  // namespace torch_openreg
