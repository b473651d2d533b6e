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
#include <vector>

#include "engine/functional_kernel.h"

namespace torch_openreg {
namespace {

std::vector<int64_t> parameters(at::IntArrayRef stride, at::IntArrayRef padding,
                                at::IntArrayRef dilation, bool transposed,
                                at::IntArrayRef outputPadding, int64_t groups) {
  std::vector<int64_t> values;
  for (at::IntArrayRef list : {stride, padding, dilation, outputPadding}) {
    values.push_back(static_cast<int64_t>(list.size()));
    values.insert(values.end(), list.begin(), list.end());
  }
  values.push_back(transposed);
  values.push_back(groups);
  return values;
}

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                       at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                       at::IntArrayRef outputPadding, int64_t groups) {
  std::vector<int64_t> strides(stride.begin(), stride.end()),
      paddings(padding.begin(), padding.end());
  std::vector<int64_t> dilations(dilation.begin(), dilation.end());
  std::vector<int64_t> outputPaddings(outputPadding.begin(), outputPadding.end());
  auto forward = [=](const std::vector<at::Tensor>& t) -> std::vector<at::Tensor> {
    const std::optional<at::Tensor> maybeBias = t[2].defined() ? std::optional(t[2]) : std::nullopt;
    return {at::convolution(t[0], t[1], maybeBias, strides, paddings, dilations, transposed,
                            outputPaddings, groups)};
  };
  return launchFunctional(
      input.device().index(), {input, weight, bias.value_or(at::Tensor())}, forward,
      {"convolution", parameters(stride, padding, dilation, transposed, outputPadding, groups)})[0];
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolutionBackward(
    const at::Tensor& gradOutput, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
    at::IntArrayRef outputPadding, int64_t groups, std::array<bool, 3> outputMask) {
  // The bias has one element per output channel.
  const int64_t outputChannels = transposed ? weight.size(1) * groups : weight.size(0);
  std::vector<int64_t> strides(stride.begin(), stride.end()),
      paddings(padding.begin(), padding.end());
  std::vector<int64_t> dilations(dilation.begin(), dilation.end());
  std::vector<int64_t> outputPaddings(outputPadding.begin(), outputPadding.end());
  auto backward = [=](const std::vector<at::Tensor>& t) -> std::vector<at::Tensor> {
    auto [gradInput, gradWeight, gradBias] = at::convolution_backward(
        t[0], t[1], t[2], std::vector<int64_t>{outputChannels}, strides, paddings, dilations,
        transposed, outputPaddings, groups, outputMask);
    return {gradInput, gradWeight, gradBias};
  };
  std::vector<int64_t> signature =
      parameters(stride, padding, dilation, transposed, outputPadding, groups);
  signature.insert(signature.end(), outputMask.begin(), outputMask.end());
  auto grads = launchFunctional(input.device().index(), {gradOutput, input, weight}, backward,
                                {"convolution_backward", std::move(signature)});
  return {grads[0], grads[1], grads[2]};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", TORCH_FN(convolution));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolutionBackward));
}

}  // namespace
}  // namespace torch_openreg
