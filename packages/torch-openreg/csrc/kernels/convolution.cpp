// convolution.cpp — convolution forward and backward.
//
// For devices other than CPU/CUDA, PyTorch routes convolutions to
// convolution_overrideable / convolution_backward_overrideable, whose default
// kernels only raise. These run the generic at::convolution (and its
// backward) on CPU aliases, so every convolution flavour (1d/2d/3d,
// transposed, grouped, dilated) uses the CPU's own algorithms on device memory.
#include <ATen/core/Tensor.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <torch/library.h>

#include <tuple>

#include "kernel_context.h"
#include "kernel_launch.h"

namespace torch_openreg {
namespace {

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                       at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                       at::IntArrayRef outputPadding, int64_t groups) {
  const c10::DeviceIndex device = input.device().index();
  at::Tensor output;
  runOnDevice(device, [&] {
    KernelContext context(device);
    std::optional<at::Tensor> biasAlias;
    if (bias && bias->defined()) biasAlias = context.alias(*bias);
    output = context.adopt(at::convolution(context.alias(input), context.alias(weight), biasAlias,
                                           stride, padding, dilation, transposed, outputPadding,
                                           groups));
  });
  return output;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolutionBackward(
    const at::Tensor& gradOutput, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
    at::IntArrayRef outputPadding, int64_t groups, std::array<bool, 3> outputMask) {
  // The bias has one element per output channel.
  const int64_t outputChannels = transposed ? weight.size(1) * groups : weight.size(0);
  const std::vector<int64_t> biasSizes{outputChannels};
  const c10::DeviceIndex device = input.device().index();
  std::tuple<at::Tensor, at::Tensor, at::Tensor> grads;
  runOnDevice(device, [&] {
    KernelContext context(device);
    auto [gradInput, gradWeight, gradBias] = at::convolution_backward(
        context.alias(gradOutput), context.alias(input), context.alias(weight), biasSizes,
        stride, padding, dilation, transposed, outputPadding, groups, outputMask);
    grads = {context.adopt(gradInput), context.adopt(gradWeight), context.adopt(gradBias)};
  });
  return grads;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", TORCH_FN(convolution));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolutionBackward));
}

}  // namespace
}  // namespace torch_openreg
