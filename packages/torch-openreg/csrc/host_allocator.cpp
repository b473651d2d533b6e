// host_allocator.cpp — orMallocHost-backed allocator with host stats.
#include "host_allocator.h"

#include <cstring>
#include <mutex>

#include "runtime_check.h"

namespace torch_openreg {
namespace {

struct PinnedBlock {
  void* pointer;
  size_t size;
};

std::mutex statsMutex;
at::HostStats stats;

void recordHost(size_t bytes, bool allocated) {
  std::lock_guard<std::mutex> lock(statsMutex);
  for (auto* stat : {&stats.active_requests, &stats.allocations}) {
    allocated ? stat->increase(1) : stat->decrease(1);
  }
  for (auto* stat : {&stats.active_bytes, &stats.allocated_bytes}) {
    allocated ? stat->increase(bytes) : stat->decrease(bytes);
  }
  allocated ? ++stats.num_host_alloc : ++stats.num_host_free;
}

void freePinned(void* context) {
  auto* block = static_cast<PinnedBlock*>(context);
  recordHost(block->size, false);
  if (orFreeHost(block->pointer) != orSuccess) {
    TORCH_WARN("openreg: freeing pinned memory failed: ", orGetLastErrorMessage());
    orGetLastError();
  }
  delete block;
}

}  // namespace

c10::DataPtr HostAllocator::allocate(size_t nbytes) {
  const c10::Device cpu(c10::DeviceType::CPU);
  if (nbytes == 0) return c10::DataPtr(nullptr, cpu);
  void* pointer = nullptr;
  OPENREG_CHECK(orMallocHost(&pointer, nbytes));
  recordHost(nbytes, true);
  return c10::DataPtr(pointer, new PinnedBlock{pointer, nbytes}, &freePinned, cpu);
}

c10::DeleterFnPtr HostAllocator::raw_deleter() const { return &freePinned; }

void HostAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

bool HostAllocator::record_event(void* /*ptr*/, void* /*ctx*/, c10::Stream /*stream*/) {
  // Pinned blocks are freed only when their last user is gone; nothing to track.
  return true;
}

void HostAllocator::empty_cache() {
  // Nothing is cached: every free returns memory to the runtime.
}

at::HostStats HostAllocator::get_stats() {
  std::lock_guard<std::mutex> lock(statsMutex);
  return stats;
}

void HostAllocator::reset_accumulated_stats() {
  std::lock_guard<std::mutex> lock(statsMutex);
  for (auto* stat : {&stats.active_requests, &stats.allocations, &stats.active_bytes,
                     &stats.allocated_bytes}) {
    stat->reset_accumulated();
  }
  stats.num_host_alloc = 0;
  stats.num_host_free = 0;
}

void HostAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(statsMutex);
  for (auto* stat : {&stats.active_requests, &stats.allocations, &stats.active_bytes,
                     &stats.allocated_bytes}) {
    stat->reset_peak();
  }
}

bool HostAllocator::isPinned(const void* pointer) {
  orPointerAttributes attributes{};
  if (orPointerGetAttributes(&attributes, pointer) != orSuccess) {
    orGetLastError();
    return false;
  }
  return attributes.type == orMemoryTypeHost;
}

HostAllocator& hostAllocator() {
  static HostAllocator* allocator = new HostAllocator();
  return *allocator;
}

REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &hostAllocator())

}  // namespace torch_openreg
