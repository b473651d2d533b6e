// rnn.cpp — the fused LSTM/GRU cells PyTorch uses on accelerators.
//
// For non-CPU devices, nn.LSTM/GRU (and the cells) call _thnn_fused_*_cell,
// which only CUDA implements. These kernels compute the same cells with ATen
// operations, asynchronously (functional_kernel.h). The workspace layout is
// private to this file (forward and backward are both defined here): LSTM
// keeps the activated gates [i, f, g, o]; GRU keeps [r, z, n, hidden_n, hx].
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <tuple>
#include <vector>

#include "engine/functional_kernel.h"

namespace torch_openreg {
namespace {

using Tensors = std::vector<at::Tensor>;

at::Tensor orUndefined(const std::optional<at::Tensor>& tensor) {
  return tensor && tensor->defined() ? *tensor : at::Tensor();
}

at::Tensor plusBias(const at::Tensor& gates, const at::Tensor& bias) {
  return bias.defined() ? gates + bias : gates;
}

// inputs: input_gates, hidden_gates, cx, input_bias?, hidden_bias?
Tensors lstmForward(const Tensors& t) {
  const at::Tensor gates = plusBias(t[0], t[3]) + plusBias(t[1], t[4]);
  const auto chunks = gates.chunk(4, 1);
  const at::Tensor i = chunks[0].sigmoid(), f = chunks[1].sigmoid();
  const at::Tensor g = chunks[2].tanh(), o = chunks[3].sigmoid();
  const at::Tensor cy = f * t[2] + i * g;
  return {o * cy.tanh(), cy, at::cat({i, f, g, o}, 1)};
}

// inputs: grad_hy?, grad_cy?, cx, cy, workspace
Tensors lstmBackward(const Tensors& t, bool hasBias) {
  const auto gates = t[4].chunk(4, 1);
  const at::Tensor &i = gates[0], &f = gates[1], &g = gates[2], &o = gates[3];
  const at::Tensor tanhCy = t[3].tanh();
  // cy = f * cx + i * g;  hy = o * tanh(cy)
  at::Tensor gradCell = t[1].defined() ? t[1] : at::zeros_like(tanhCy);
  at::Tensor gradO = at::zeros_like(o);
  if (t[0].defined()) {
    gradCell = gradCell + t[0] * o * (1 - tanhCy * tanhCy);
    gradO = t[0] * tanhCy * o * (1 - o);
  }
  const at::Tensor gradGates = at::cat({gradCell * g * i * (1 - i), gradCell * t[2] * f * (1 - f),
                                        gradCell * i * (1 - g * g), gradO},
                                       1);
  return {gradGates, gradCell * f, hasBias ? gradGates.sum(0) : at::Tensor()};
}

// inputs: input_gates, hidden_gates, hx, input_bias?, hidden_bias?
Tensors gruForward(const Tensors& t) {
  const auto in = plusBias(t[0], t[3]).chunk(3, 1);
  const auto hidden = plusBias(t[1], t[4]).chunk(3, 1);
  const at::Tensor r = (in[0] + hidden[0]).sigmoid();
  const at::Tensor z = (in[1] + hidden[1]).sigmoid();
  const at::Tensor n = (in[2] + r * hidden[2]).tanh();
  // (hx - n) * z + n, in this order, gives hy the layout of hx, as the CPU's
  // gru_cell does.
  return {(t[2] - n) * z + n, at::cat({r, z, n, hidden[2], t[2]}, 1)};
}

// inputs: grad_hy, workspace
Tensors gruBackward(const Tensors& t, bool hasBias) {
  const auto saved = t[1].chunk(5, 1);
  const at::Tensor &r = saved[0], &z = saved[1], &n = saved[2], &hiddenN = saved[3], &hx = saved[4];
  const at::Tensor& gradHy = t[0];
  // hy = n + z * (hx - n);  n = tanh(in_n + r * hidden_n)
  const at::Tensor gradNPre = gradHy * (1 - z) * (1 - n * n);
  const at::Tensor gradZPre = gradHy * (hx - n) * z * (1 - z);
  const at::Tensor gradRPre = gradNPre * hiddenN * r * (1 - r);
  const at::Tensor gradInput = at::cat({gradRPre, gradZPre, gradNPre}, 1);
  const at::Tensor gradHidden = at::cat({gradRPre, gradZPre, gradNPre * r}, 1);
  return {gradInput, gradHidden, gradHy * z, hasBias ? gradInput.sum(0) : at::Tensor(),
          hasBias ? gradHidden.sum(0) : at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstmCell(
    const at::Tensor& inputGates, const at::Tensor& hiddenGates, const at::Tensor& cx,
    const std::optional<at::Tensor>& inputBias, const std::optional<at::Tensor>& hiddenBias) {
  Tensors out = launchFunctional(
      inputGates.device().index(),
      {inputGates, hiddenGates, cx, orUndefined(inputBias), orUndefined(hiddenBias)}, lstmForward,
      {"lstm_cell", {}});
  return {out[0], out[1], out[2]};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstmCellBackward(
    const std::optional<at::Tensor>& gradHy, const std::optional<at::Tensor>& gradCy,
    const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& workspace, bool hasBias) {
  if (!orUndefined(gradHy).defined() && !orUndefined(gradCy).defined()) return {};
  Tensors out = launchFunctional(workspace.device().index(),
                                 {orUndefined(gradHy), orUndefined(gradCy), cx, cy, workspace},
                                 [hasBias](const Tensors& t) { return lstmBackward(t, hasBias); },
                                 {"lstm_cell_backward", {hasBias}});
  return {out[0], out[1], out[2]};
}

std::tuple<at::Tensor, at::Tensor> gruCell(const at::Tensor& inputGates,
                                           const at::Tensor& hiddenGates, const at::Tensor& hx,
                                           const std::optional<at::Tensor>& inputBias,
                                           const std::optional<at::Tensor>& hiddenBias) {
  Tensors out = launchFunctional(
      inputGates.device().index(),
      {inputGates, hiddenGates, hx, orUndefined(inputBias), orUndefined(hiddenBias)}, gruForward,
      {"gru_cell", {}});
  return {out[0], out[1]};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gruCellBackward(
    const at::Tensor& gradHy, const at::Tensor& workspace, bool hasBias) {
  Tensors out = launchFunctional(workspace.device().index(), {gradHy, workspace},
                                 [hasBias](const Tensors& t) { return gruBackward(t, hasBias); },
                                 {"gru_cell_backward", {hasBias}});
  return {out[0], out[1], out[2], out[3], out[4]};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(lstmCell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(lstmCellBackward));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(gruCell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(gruCellBackward));
}

}  // namespace
}  // namespace torch_openreg
