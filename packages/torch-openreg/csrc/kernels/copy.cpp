// copy.cpp — copies between host and device and between devices, and item().
//
// PyTorch routes Tensor.copy_ for a non-CPU/CUDA device to _copy_from. Every
// direction is one CPU copy_ on aliases, run as work on the stream of the
// destination's device (or the source's, for device-to-host): the kernel reads
// host memory directly and converts dtype and layout on the way, so there is
// never a staging buffer.
#include <ATen/core/Tensor.h>
#include <ATen/ops/_local_scalar_dense.h>
#include <ATen/ops/copy.h>
#include <torch/library.h>

#include "kernel_context.h"
#include "kernel_launch.h"

namespace torch_openreg {
namespace {

bool isOpenReg(const at::Tensor& tensor) {
  return tensor.device().type() == c10::DeviceType::PrivateUse1;
}

void checkCopyable(const at::Tensor& tensor, const char* role) {
  TORCH_CHECK(isOpenReg(tensor) || tensor.device().type() == c10::DeviceType::CPU,
              "openreg can copy to and from CPU or openreg tensors only; the ", role, " is on ",
              tensor.device());
}

at::Tensor copyFrom(const at::Tensor& self, const at::Tensor& dst, bool /*nonBlocking*/) {
  checkCopyable(self, "source");
  checkCopyable(dst, "destination");
  const c10::DeviceIndex device = isOpenReg(dst) ? dst.device().index() : self.device().index();
  runOnDevice(device, [&] {
    KernelContext context(device);
    context.alias(dst).copy_(context.alias(self));
  });
  return dst;
}

at::Tensor copyFromAndResize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  return copyFrom(self, dst, false);
}

at::Scalar localScalarDense(const at::Tensor& self) {
  at::Scalar value;
  runOnDevice(self.device().index(), [&] {
    KernelContext context(self.device().index());
    value = at::_local_scalar_dense(context.alias(self));
  });
  return value;
}

// The CPU copy_ run by copyFrom resolves conjugate/negative bits itself (the
// aliases carry them), so these keys must not materialise the source first:
// their generic fallback would clone, which copies, which recurses.
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
