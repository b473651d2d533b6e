// copy.cpp — copies between host and device and between devices, and item().
//
// PyTorch routes Tensor.copy_ for a non-CPU/CUDA device to _copy_from. A copy
// that moves bytes unchanged (same dtype, sizes and strides over one dense
// range of memory, no lazy conjugate or negative bit) is one runtime copy,
// orMemcpyAsync: the device's own copy path, which OPENREG_FAULT_MEMCPY can
// fail, as a failing DMA would fail a CUDA copy. .item() is one too: the
// element's bytes, read on the host. Every other copy converts on the way
// (dtype, layout, broadcasting, conjugation) and is a kernel: one CPU copy_ on
// aliases, run as stream work, reading host memory directly (never a staging
// buffer). Host synchronisation follows CUDA:
//   host -> device: asynchronous only with non_blocking=True from pinned memory;
//   device -> host: asynchronous only with non_blocking=True into pinned memory;
//   device -> device: always asynchronous; across devices the copy runs on the
//   destination's current stream, after a two-way barrier between the two
//   devices' current streams, so that its failure reaches whoever next waits
//   for the destination.
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/_local_scalar_dense.h>
#include <ATen/ops/copy.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <memory>
#include <optional>
#include <utility>

#include "base/debug_modes.h"
#include "base/device_activity.h"
#include "base/gil.h"
#include "base/kernel_thread.h"
#include "base/runtime_check.h"
#include "base/sync_debug.h"
#include "engine/kernel_context.h"
#include "engine/kernel_launch.h"
#include "engine/race_detector.h"
#include "integration/host_allocator.h"
#include "integration/stream.h"

namespace torch_openreg {
namespace {

bool isPinned(const at::Tensor& tensor) {
  return tensor.has_storage() && HostAllocator::isPinned(tensor.storage().data());
}

void checkCopyable(const at::Tensor& tensor, const char* role) {
  TORCH_CHECK(isOpenReg(tensor) || tensor.device().type() == c10::DeviceType::CPU,
              "openreg can copy to and from CPU or openreg tensors only; the ", role, " is on ",
              tensor.device());
}

const char* copyLabel(const at::Tensor& source, const at::Tensor& destination) {
  if (!isOpenReg(source)) return "Memcpy HtoD";
  return isOpenReg(destination) ? "Memcpy DtoD" : "Memcpy DtoH";
}

orMemcpyKind copyKind(const at::Tensor& source, const at::Tensor& destination) {
  if (!isOpenReg(source)) return orMemcpyHostToDevice;
  return isOpenReg(destination) ? orMemcpyDeviceToDevice : orMemcpyDeviceToHost;
}

// True when the copy is the bytes of one range of memory, unchanged. A kernel
// copying from its own worker stays a kernel: a runtime copy queued from there
// would run after the kernel, not within it.
bool movesBytesUnchanged(const at::Tensor& source, const at::Tensor& destination) {
  return !source.is_nested() && !destination.is_nested() &&
         source.scalar_type() == destination.scalar_type() &&
         source.sizes() == destination.sizes() && source.strides() == destination.strides() &&
         source.layout() == c10::kStrided && destination.layout() == c10::kStrided &&
         !source.is_conj() && !destination.is_conj() && !source.is_neg() && !destination.is_neg() &&
         source.is_non_overlapping_and_dense() && !insideKernel();
}

// A runtime copy queued on a stream, with what it needs around it: the
// profiler's record (the runtime's copy has no hook of its own, so markers
// queued just before and after it time it), the host tensor of an asynchronous
// copy kept alive until the copy has run (the pinned allocator relies on it, as
// on the kernel path's captures), and the wait of a blocking copy.
class RuntimeCopy {
 public:
  explicit RuntimeCopy(const c10::Stream& stream)
      : stream_(stream), handle_(nativeHandle(stream)), recording_(stream) {
    if (auto record = recording_.takeShared()) {
      timing_ = std::make_shared<Timing>();
      timing_->record = std::move(record);
      OPENREG_CHECK(openreg::launchHostFunc(
          handle_, [timing = timing_] { timing->span.emplace(timing->record); }));
    }
  }

  // Copies; returns once it is done if `waitForIt` (the runtime also waits by
  // itself when a side is pageable host memory). `host` is the host tensor of a
  // pinned side, held until the copy has run.
  void run(void* destination, const void* source, size_t bytes, orMemcpyKind kind, bool waitForIt,
           at::Tensor host = {}) {
    {
      GilReleasedIfHeld unlocked;  // a copy from or into pageable memory waits for the stream
      OPENREG_CHECK(orMemcpyAsync(destination, source, bytes, kind, handle_));
    }
    if (timing_ != nullptr || host.defined()) {
      OPENREG_CHECK(openreg::launchHostFunc(
          handle_, [timing = std::move(timing_), host = std::move(host)]() mutable {
            if (timing != nullptr) timing->span.reset();  // the record ends here
            host = at::Tensor();  // the copy no longer uses it
          }));
    }
    if (waitForIt || launchBlocking()) {
      GilReleasedIfHeld unlocked;
      OPENREG_CHECK(orStreamSynchronize(handle_));
    }
  }

 private:
  struct Timing {
    std::shared_ptr<std::unique_ptr<DeviceActivity>> record;
    std::optional<DeviceActivityTiming> span;
  };
  c10::Stream stream_;
  orStream_t handle_;
  LaunchRecording recording_;
  std::shared_ptr<Timing> timing_;
};

void copyBytes(const at::Tensor& source, const at::Tensor& destination, const c10::Stream& stream,
               bool waitForIt) {
  checkStorageCovers(source);
  checkStorageCovers(destination);
  // The CPU's copy_ refuses views that share some elements (not all): the result
  // would depend on the order of the copy. So does this one, at the call.
  at::assert_no_partial_overlap(destination, source);
  const at::Tensor& host = isOpenReg(source) ? destination : source;
  const bool pinnedHost = !(isOpenReg(source) && isOpenReg(destination)) && isPinned(host);
  RuntimeCopy(stream).run(destination.data_ptr(), source.const_data_ptr(),
                          source.numel() * source.element_size(), copyKind(source, destination),
                          waitForIt, pinnedHost && !waitForIt ? host : at::Tensor());
}

// Host tensors are captured as they are (keeping pinned memory alive until
// the copy has run); device tensors as aliases (stream order protects them).
void copyWithKernel(const at::Tensor& source, const at::Tensor& destination,
                    c10::DeviceIndex device, bool waitForIt) {
  KernelContext context(device);
  const at::Tensor from = context.alias(source);
  const at::Tensor to = context.alias(destination);
  if (waitForIt) {
    runOnDevice(device, [&] { to.copy_(from); });
  } else {
    launchOnDevice(device, [from, to] { to.copy_(from); });
  }
}

void copyOnDevice(const at::Tensor& source, const at::Tensor& destination, c10::DeviceIndex device,
                  bool waitForIt) {
  const c10::Stream stream = currentStream(device);
  const bool checkRaces = debugModeOn(kDebugRaces);
  if (checkRaces) checkLaunch("aten::copy_", stream, {source}, {destination});
  DeviceActivityKindScope profiledAs(ActivityKind::Memcpy, copyLabel(source, destination));
  if (movesBytesUnchanged(source, destination)) {
    copyBytes(source, destination, stream, waitForIt);
  } else {
    copyWithKernel(source, destination, device, waitForIt);
  }
  // A blocking copy synchronizes, as on CUDA.
  if (waitForIt && checkRaces) hostWaitedFor(stream);
}

void copyAcrossDevices(const at::Tensor& source, const at::Tensor& destination) {
  const c10::Stream sourceStream = currentStream(source.device().index());
  const c10::Stream destinationStream = currentStream(destination.device().index());
  // The copy waits for the source's queued work, and the source's later work
  // waits for the copy (it must not change what the copy still reads).
  streamWaitsFor(destinationStream, sourceStream);
  copyOnDevice(source, destination, destination.device().index(), false);
  streamWaitsFor(sourceStream, destinationStream);
}

at::Tensor copyFrom(const at::Tensor& self, const at::Tensor& dst, bool nonBlocking) {
  checkCopyable(self, "source");
  checkCopyable(dst, "destination");
  if (dst.numel() == 0) return dst;
  if (isOpenReg(self) && isOpenReg(dst)) {
    if (self.device() == dst.device()) {
      copyOnDevice(self, dst, dst.device().index(), false);
    } else {
      copyAcrossDevices(self, dst);
    }
  } else if (isOpenReg(dst)) {
    // CUDA's rule for the sync debug mode: a blocking host copy synchronizes
    // (a non-blocking one from pageable memory waits too, but silently).
    if (!nonBlocking) checkSynchronization("a copy from host memory with non_blocking=False");
    copyOnDevice(self, dst, dst.device().index(), !(nonBlocking && isPinned(self)));
  } else {
    if (!nonBlocking) checkSynchronization("a copy to host memory with non_blocking=False");
    const bool asynchronous = nonBlocking && isPinned(dst);
    // Chaos scheduling: the host may read the copy only after synchronizing,
    // so it completes as late as that allows (the runtime's own copies into
    // pinned memory do this themselves).
    if (asynchronous && debugModeOn(kDebugChaos) && !movesBytesUnchanged(self, dst)) {
      OPENREG_CHECK(orDebugHoldStream(nativeHandle(currentStream(self.device().index()))));
    }
    copyOnDevice(self, dst, self.device().index(), !asynchronous);
  }
  return dst;
}

at::Tensor copyFromAndResize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  return copyFrom(self, dst, false);
}

at::Scalar localScalarDense(const at::Tensor& self) {
  checkSynchronization("reading a tensor value on the host (item)");
  const c10::DeviceIndex device = self.device().index();
  const c10::Stream stream = currentStream(device);
  const bool checkRaces = debugModeOn(kDebugRaces);
  if (checkRaces) checkLaunch("aten::_local_scalar_dense (.item())", stream, {self}, {});
  DeviceActivityKindScope profiledAs(ActivityKind::Memcpy, "Memcpy DtoH");
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  at::Scalar value;
  if (self.is_conj() || self.is_neg() || insideKernel()) {
    runOnDevice(device, [&] {
      KernelContext context(device);
      value = at::_local_scalar_dense(context.alias(self));
    });
  } else {
    checkStorageCovers(self);
    const at::Tensor element = at::empty({}, self.options().device(c10::kCPU));
    RuntimeCopy(stream).run(element.data_ptr(), self.const_data_ptr(), self.element_size(),
                            orMemcpyDeviceToHost, true);
    value = at::_local_scalar_dense(element);
  }
  if (checkRaces) hostWaitedFor(stream);
  return value;
}

// The CPU copy_ run by copyKernel resolves conjugate/negative bits itself
// (the aliases carry them), so these keys must not materialise the source
// first: their generic fallback would clone, which copies, which recurses.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from", TORCH_FN(copyFrom));
  m.impl("_copy_from_and_resize", TORCH_FN(copyFromAndResize));
  m.impl("_local_scalar_dense", TORCH_FN(localScalarDense));
}

}  // namespace
}  // namespace torch_openreg
