// testing_hooks.cpp — see testing_hooks.h.
#include "python/testing_hooks.h"

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/csrc/utils/pybind.h>

#include <string>

#include "base/device.h"
#include "integration/host_allocator.h"
#include "memory/block_pool.h"

namespace torch_openreg {
namespace {

AllocatorFault allocatorFaultNamed(const std::string& name) {
  if (name == "none") return AllocatorFault::None;
  if (name == "ignore_recorded_streams") return AllocatorFault::IgnoreRecordedStreams;
  if (name == "kernels_ignore_queued_work") return AllocatorFault::KernelsIgnoreQueuedWork;
  TORCH_CHECK_VALUE(false, "unknown allocator fault '", name,
                    "': expected 'none', 'ignore_recorded_streams' or "
                    "'kernels_ignore_queued_work'");
}

}  // namespace

void bindTestingHooks(pybind11::module& m) {
  m.def(
      "_set_allocator_fault",
      [](const std::string& name) { setAllocatorFault(allocatorFaultNamed(name)); },
      "For tests: make the caching allocator break one of its reuse rules ('none' restores "
      "it), to show that OPENREG_DEBUG=races reports memory reused under queued work.");
  m.def(
      "_host_record_event",
      [](const at::Tensor& tensor, int64_t streamId, int device) {
        const c10::Stream stream(c10::Stream::UNSAFE,
                                 openregDevice(static_cast<c10::DeviceIndex>(device)), streamId);
        return hostAllocator().record_event(tensor.data_ptr(), nullptr, stream);
      },
      "What a copy kernel calls on pinned memory it uses on a stream "
      "(at::HostAllocator::record_event): False if the tensor's memory is not a pinned block.");
}

}  // namespace torch_openreg
