// fill.cpp — fill_: the simplest native kernel, and the pattern to copy.
//
// A native kernel is a function registered for PrivateUse1 that enqueues its
// work with launchOnDevice(), saying in a LaunchSpec what the work reads and
// writes (the launch path checks races and records it for the profiler from
// that). KernelContext::alias() gives CPU tensors over
// the device memory, on which any CPU code (ATen or a hand-written loop) runs
// inside the work. The work captures aliases, not the openreg tensors: like a
// CUDA kernel, it does not keep device memory alive (stream order does).
#include <ATen/core/Tensor.h>
#include <ATen/ops/fill.h>
#include <torch/library.h>

#include "engine/kernel_context.h"
#include "engine/kernel_launch.h"

namespace torch_openreg {
namespace {

at::Tensor& fillScalar(at::Tensor& self, const at::Scalar& value) {
  const c10::DeviceIndex device = self.device().index();
  // What the work touches, for the checks every launch gets (launch_spec.h).
  const LaunchSpec spec{LaunchContext::forDevice(device), "aten::fill_.Scalar", {}, self};
  const at::Tensor target = KernelContext(device).alias(self);
  launchOnDevice(spec, [target, value] { target.fill_(value); });
  return self;
}

at::Tensor& fillTensor(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ",
              value.dim(), " dimensions.");
  TORCH_CHECK(value.device().type() == c10::DeviceType::CPU || value.device() == self.device(),
              "Expected all tensors to be on the same device, but got value is on ", value.device(),
              ", different from other tensors on ", self.device(),
              " (when checking argument in method fill_)");
  const c10::DeviceIndex device = self.device().index();
  const LaunchSpec spec{LaunchContext::forDevice(device), "aten::fill_.Tensor", value, self};
  KernelContext context(device);
  const at::Tensor target = context.alias(self);
  // A CPU value is read now: the caller may change it before the work runs.
  const at::Tensor source = value.device().is_cpu() ? value.clone() : context.alias(value);
  launchOnDevice(spec, [target, source] { target.fill_(source); });
  return self;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("fill_.Scalar", TORCH_FN(fillScalar));
  m.impl("fill_.Tensor", TORCH_FN(fillTensor));
}

}  // namespace
}  // namespace torch_openreg
