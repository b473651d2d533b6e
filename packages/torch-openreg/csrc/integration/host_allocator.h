// host_allocator.h — pinned host memory for tensor.pin_memory().
//
// Pinned tensors are CPU tensors whose memory comes from the runtime's
// orMallocHost, so the runtime can tell them apart (is_pinned(), and copies
// from/to them may be asynchronous). Returned by the hooks'
// getPinnedMemoryAllocator() and registered as the PrivateUse1 host allocator.
#pragma once

#include <ATen/core/CachingHostAllocator.h>

namespace torch_openreg {

class HostAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  bool record_event(void* ptr, void* ctx, c10::Stream stream) override;
  void empty_cache() override;
  at::HostStats get_stats() override;
  void reset_accumulated_stats() override;
  void reset_peak_stats() override;

  static bool isPinned(const void* pointer);
};

HostAllocator& hostAllocator();

}  // namespace torch_openreg
