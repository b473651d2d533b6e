// host_memory.cpp — pinned host allocations.
#include "host_memory.h"

#include <cstdlib>

#include "environment.h"
#include "errors.h"

namespace openreg::runtime {

void* HostMemory::allocate(size_t bytes) {
  void* pointer = nullptr;
  if (posix_memalign(&pointer, pageSize(), bytes) != 0 || pointer == nullptr) {
    fail(orErrorOutOfMemory, "orMallocHost: cannot allocate ", bytes, " bytes of host memory");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  live_.emplace(reinterpret_cast<uintptr_t>(pointer), bytes);
  return pointer;
}

void HostMemory::retire(void* pointer) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = live_.find(reinterpret_cast<uintptr_t>(pointer));
  if (found == live_.end()) {
    fail(orErrorInvalidHostPointer, "orFreeHost: ", pointer,
         " is not a live orMallocHost allocation (already freed, or an interior pointer?)");
  }
  live_.erase(found);
}

std::optional<HostAllocation> HostMemory::find(const void* pointer) const {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  std::lock_guard<std::mutex> lock(mutex_);
  auto after = live_.upper_bound(address);
  if (after == live_.begin()) return std::nullopt;
  auto candidate = std::prev(after);
  // A zero-byte allocation still owns its base address.
  const size_t extent = candidate->second == 0 ? 1 : candidate->second;
  if (address >= candidate->first + extent) return std::nullopt;
  return HostAllocation{candidate->first, candidate->second};
}

}  // namespace openreg::runtime
