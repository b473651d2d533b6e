// fill.cpp — fill_: the simplest native kernel, and the pattern to copy.
//
// A native kernel is a function registered for PrivateUse1 that runs its work
// with runOnDevice(); inside, KernelContext::alias() gives CPU tensors over
// the device memory, on which any CPU code (ATen or a hand-written loop) runs.
#include <ATen/core/Tensor.h>
#include <ATen/ops/fill.h>
#include <torch/library.h>

#include "kernel_context.h"
#include "kernel_launch.h"

namespace torch_openreg {
namespace {

at::Tensor& fillScalar(at::Tensor& self, const at::Scalar& value) {
  const c10::DeviceIndex device = self.device().index();
  runOnDevice(device, [&] {
    KernelContext context(device);
    context.alias(self).fill_(value);
  });
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
  runOnDevice(device, [&] {
    KernelContext context(device);
    context.alias(self).fill_(context.alias(value));
  });
  return self;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("fill_.Scalar", TORCH_FN(fillScalar));
  m.impl("fill_.Tensor", TORCH_FN(fillTensor));
}

}  // namespace
}  // namespace torch_openreg
