// copy.cpp — copies between host and device and between devices, and item().
//
// PyTorch routes Tensor.copy_ for a non-CPU/CUDA device to _copy_from. Every
// direction is one CPU copy_ on aliases, run as stream work (the kernel reads
// host memory directly and converts dtype and layout on the way, so there is
// never a staging buffer). Host synchronisation follows CUDA:
//   host -> device: asynchronous only with non_blocking=True from pinned memory;
//   device -> host: asynchronous only with non_blocking=True into pinned memory;
//   device -> device: always asynchronous; across devices, a two-way barrier
//   between the two devices' current streams orders it with both sides' work.
#include <ATen/core/Tensor.h>
#include <ATen/ops/_local_scalar_dense.h>
#include <ATen/ops/copy.h>
#include <torch/library.h>

#include "base/debug_modes.h"
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

// Host tensors are captured as they are (keeping pinned memory alive until
// the copy has run); device tensors as aliases (stream order protects them).
const char* copyLabel(const at::Tensor& source, const at::Tensor& destination) {
  if (!isOpenReg(source)) return "Memcpy HtoD";
  return isOpenReg(destination) ? "Memcpy DtoD" : "Memcpy DtoH";
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
  KernelContext context(device);
  const at::Tensor from = context.alias(source);
  const at::Tensor to = context.alias(destination);
  if (waitForIt) {
    runOnDevice(spec, [&] { to.copy_(from); });
  } else {
    launchOnDevice(spec, [from, to] { to.copy_(from); });
  }
}

void copyAcrossDevices(const at::Tensor& source, const at::Tensor& destination) {
  const c10::Stream sourceStream = currentStream(source.device().index());
  const c10::Stream destinationStream = currentStream(destination.device().index());
  // Nobody may still be using the destination, and the destination's later
  // work must see the copy.
  streamWaitsFor(sourceStream, destinationStream);
  copyOnDevice(source, destination, source.device().index(), false);
  streamWaitsFor(destinationStream, sourceStream);
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
    // so it completes as late as that allows.
    if (asynchronous && debugModeOn(kDebugChaos)) {
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
  at::Scalar value;
  const c10::DeviceIndex device = self.device().index();
  LaunchSpec spec{LaunchContext::forDevice(device), "aten::_local_scalar_dense (.item())", self};
  spec.activity = ActivityKind::Memcpy;
  spec.activityLabel = "Memcpy DtoH";
  spec.synchronizes = "reading a tensor value on the host (item)";
  spec.hostWaits = true;
  runOnDevice(spec, [&] {
    KernelContext context(device);
    value = at::_local_scalar_dense(context.alias(self));
  });
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
