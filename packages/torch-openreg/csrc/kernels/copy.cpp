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

#include <functional>
#include <utility>

#include "base/debug_modes.h"
#include "base/kernel_thread.h"
#include "base/runtime_check.h"
#include "engine/kernel_context.h"
#include "engine/kernel_launch.h"
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

// The bytes of one range of memory, copied by the runtime (orMemcpyAsync)
// through the launch path. The host tensor of an asynchronous copy from or
// into pinned memory is held until the copy has run (the pinned allocator
// relies on it, as on the kernel path's captures).
void copyBytes(const LaunchSpec& spec, const at::Tensor& source, const at::Tensor& destination) {
  checkStorageCovers(source);
  checkStorageCovers(destination);
  // The CPU's copy_ refuses views that share some elements (not all): the result
  // would depend on the order of the copy. So does this one, at the call.
  at::assert_no_partial_overlap(destination, source);
  const at::Tensor& host = isOpenReg(source) ? destination : source;
  const bool holdHost =
      !(isOpenReg(source) && isOpenReg(destination)) && isPinned(host) && !spec.hostWaits;
  std::function<void()> release;
  if (holdHost) release = [host] {};
  copyOnStream(spec, destination.data_ptr(), source.const_data_ptr(),
               source.numel() * source.element_size(), copyKind(source, destination),
               std::move(release));
}

// A copy that converts on the way: one CPU copy_ on aliases. Host tensors are
// captured as they are (keeping pinned memory alive until the copy has run);
// device tensors as aliases (stream order protects them).
void copyWithKernel(const LaunchSpec& spec, const at::Tensor& source,
                    const at::Tensor& destination) {
  KernelContext context(spec.context.device);
  const at::Tensor from = context.alias(source);
  const at::Tensor to = context.alias(destination);
  if (spec.hostWaits) {
    runOnDevice(spec, [&] { to.copy_(from); });
  } else {
    launchOnDevice(spec, [from, to] { to.copy_(from); });
  }
}

// `synchronizes` names the copy for the sync debug mode when the program
// asked to wait for it (null: it waits silently, or not at all).
void copyOnDevice(const at::Tensor& source, const at::Tensor& destination, c10::DeviceIndex device,
                  bool waitForIt, const char* synchronizes = nullptr) {
  LaunchSpec spec{LaunchContext::forDevice(device), "aten::copy_", source, destination};
  spec.activity = ActivityKind::Memcpy;
  spec.activityLabel = copyLabel(source, destination);
  spec.synchronizes = synchronizes;
  spec.hostWaits = waitForIt;  // a blocking copy synchronizes, as on CUDA
  if (movesBytesUnchanged(source, destination)) {
    copyBytes(spec, source, destination);
  } else {
    copyWithKernel(spec, source, destination);
  }
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
    copyOnDevice(self, dst, dst.device().index(), !(nonBlocking && isPinned(self)),
                 nonBlocking ? nullptr : "a copy from host memory with non_blocking=False");
  } else {
    const bool asynchronous = nonBlocking && isPinned(dst);
    // Chaos scheduling: the host may read the copy only after synchronizing,
    // so it completes as late as that allows (the runtime's own copies into
    // pinned memory do this themselves).
    if (asynchronous && debugModeOn(kDebugChaos) && !movesBytesUnchanged(self, dst)) {
      OPENREG_CHECK(orDebugHoldStream(nativeHandle(currentStream(self.device().index()))));
    }
    copyOnDevice(self, dst, self.device().index(), !asynchronous,
                 nonBlocking ? nullptr : "a copy to host memory with non_blocking=False");
  }
  return dst;
}

at::Tensor copyFromAndResize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  return copyFrom(self, dst, false);
}

at::Scalar localScalarDense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  const c10::DeviceIndex device = self.device().index();
  LaunchSpec spec{LaunchContext::forDevice(device), "aten::_local_scalar_dense (.item())", self};
  spec.activity = ActivityKind::Memcpy;
  spec.activityLabel = "Memcpy DtoH";
  spec.synchronizes = "reading a tensor value on the host (item)";
  spec.hostWaits = true;
  at::Scalar value;
  if (self.is_conj() || self.is_neg() || insideKernel()) {
    runOnDevice(spec, [&] {
      KernelContext context(device);
      value = at::_local_scalar_dense(context.alias(self));
    });
    return value;
  }
  checkStorageCovers(self);
  const at::Tensor element = at::empty({}, self.options().device(c10::kCPU));
  copyOnStream(spec, element.data_ptr(), self.const_data_ptr(), self.element_size(),
               orMemcpyDeviceToHost);
  return at::_local_scalar_dense(element);
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
