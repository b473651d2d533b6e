// host_memory.h — registry of pinned host allocations (orMallocHost).
//
// "Pinned" memory is ordinary page-aligned host memory that the runtime
// knows about: copies from/to it may run asynchronously, exactly the
// distinction CUDA makes between pinned and pageable memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>

namespace openreg::runtime {

struct HostAllocation {
  uintptr_t base;
  size_t size;
};

class HostMemory {
 public:
  void* allocate(size_t bytes);
  // Ends the allocation for the API (a second free is an error); the caller
  // frees the memory itself with std::free once no queued work uses it.
  void retire(void* pointer);
  std::optional<HostAllocation> find(const void* pointer) const;

 private:
  mutable std::mutex mutex_;
  std::map<uintptr_t, size_t> live_;
};

}  // namespace openreg::runtime
