// host_allocator.cpp — cached orMallocHost blocks with host stats.
//
// Sizes round up to a power of two (at least one page) and freed blocks wait
// in a free list per size for the next request, as in CUDA's host caching
// allocator: pinned allocations are expensive and pinned buffers are usually
// reused with the same sizes. empty_cache() returns the free ones. Statistics
// are at::HostStats, as torch.cuda.host_memory_stats reports them: blocks and
// bytes owned (allocations) and handed out (active), runtime calls and the
// time they took.
#include "integration/host_allocator.h"

#include <array>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "base/debug_modes.h"
#include "base/runtime_check.h"

namespace torch_openreg {
namespace {

constexpr size_t kMinimumBlock = 4096;

struct PinnedBlock {
  void* pointer;
  size_t size;       // rounded size of the runtime allocation
  size_t requested;  // bytes asked for by the current user
};

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
      auto& free = freeBySize_[size];
      if (!free.empty()) {
        block = free.back();
        free.pop_back();
      }
    }
    if (block == nullptr) block = allocateNew(size);
    block->requested = bytes;
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.active_requests.increase(1);
    stats_.active_bytes.increase(block->size);
    return block;
  }

  void giveBack(PinnedBlock* block) {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.active_requests.decrease(1);
    stats_.active_bytes.decrease(block->size);
    freeBySize_[block->size].push_back(block);
  }

  void empty() {
    std::lock_guard<std::mutex> lock(mutex_);
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

  PinnedBlock* allocateNew(size_t size) {
    void* pointer = nullptr;
    orError_t status = orSuccess;
    const int64_t microseconds = timedMicroseconds([&] { status = orMallocHost(&pointer, size); });
    OPENREG_CHECK(status);
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.host_alloc_time.increase(microseconds);
    stats_.allocations.increase(1);
    stats_.allocated_bytes.increase(size);
    ++stats_.num_host_alloc;
    return new PinnedBlock{pointer, size, 0};
  }

  std::mutex mutex_;
  std::map<size_t, std::vector<PinnedBlock*>> freeBySize_;
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

bool HostAllocator::record_event(void* /*ptr*/, void* /*ctx*/, c10::Stream /*stream*/) {
  // Asynchronous copies hold their host tensors until they have run, so a
  // cached block is never handed out while a copy still reads or writes it.
  return true;
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
