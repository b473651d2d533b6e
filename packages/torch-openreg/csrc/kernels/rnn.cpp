// rnn.cpp — the fused LSTM/GRU cells PyTorch uses on accelerators.
//
// For non-CPU devices, nn.LSTM/GRU (and the cells) call _thnn_fused_*_cell,
// which only CUDA implements. These kernels compute the same cells with ATen
// operations on CPU aliases. The workspace layout is private to this file
// (forward and backward are both defined here): LSTM keeps the activated
// gates [i, f, g, o]; GRU keeps [r, z, n, hidden_n, hx].
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/zeros_like.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/tanh.h>
#include <ATen/TensorOperators.h>
#include <torch/library.h>

#include <tuple>

#include "kernel_context.h"
#include "kernel_launch.h"

namespace torch_openreg {
namespace {

bool present(const std::optional<at::Tensor>& tensor) { return tensor && tensor->defined(); }

at::Tensor withBias(const at::Tensor& gates, const std::optional<at::Tensor>& bias,
                    KernelContext& context) {
  const at::Tensor aliased = context.alias(gates);
  return present(bias) ? aliased + context.alias(*bias) : aliased;
}

at::Tensor sumOverBatch(const at::Tensor& gradGates) { return gradGates.sum(0); }

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstmCell(
    const at::Tensor& inputGates, const at::Tensor& hiddenGates, const at::Tensor& cx,
    const std::optional<at::Tensor>& inputBias, const std::optional<at::Tensor>& hiddenBias) {
  const c10::DeviceIndex device = inputGates.device().index();
  std::tuple<at::Tensor, at::Tensor, at::Tensor> result;
  runOnDevice(device, [&] {
    KernelContext context(device);
    const at::Tensor gates = withBias(inputGates, inputBias, context) +
                             withBias(hiddenGates, hiddenBias, context);
    const auto chunks = gates.chunk(4, 1);
    const at::Tensor i = chunks[0].sigmoid(), f = chunks[1].sigmoid();
    const at::Tensor g = chunks[2].tanh(), o = chunks[3].sigmoid();
    const at::Tensor cy = f * context.alias(cx) + i * g;
    const at::Tensor hy = o * cy.tanh();
    result = {context.adopt(hy), context.adopt(cy), context.adopt(at::cat({i, f, g, o}, 1))};
  });
  return result;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstmCellBackward(
    const std::optional<at::Tensor>& gradHy, const std::optional<at::Tensor>& gradCy,
    const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& workspace, bool hasBias) {
  if (!present(gradHy) && !present(gradCy)) return {};
  const c10::DeviceIndex device = workspace.device().index();
  std::tuple<at::Tensor, at::Tensor, at::Tensor> grads;
  runOnDevice(device, [&] {
    KernelContext context(device);
    const auto gates = context.alias(workspace).chunk(4, 1);
    const at::Tensor &i = gates[0], &f = gates[1], &g = gates[2], &o = gates[3];
    const at::Tensor tanhCy = context.alias(cy).tanh();
    // cy = f * cx + i * g;  hy = o * tanh(cy)
    at::Tensor gradCell = present(gradCy) ? context.alias(*gradCy) : at::zeros_like(tanhCy);
    at::Tensor gradO = at::zeros_like(o);
    if (present(gradHy)) {
      const at::Tensor gh = context.alias(*gradHy);
      gradCell = gradCell + gh * o * (1 - tanhCy * tanhCy);
      gradO = gh * tanhCy * o * (1 - o);
    }
    const at::Tensor gradI = gradCell * g * i * (1 - i);
    const at::Tensor gradF = gradCell * context.alias(cx) * f * (1 - f);
    const at::Tensor gradG = gradCell * i * (1 - g * g);
    const at::Tensor gradGates = at::cat({gradI, gradF, gradG, gradO}, 1);
    grads = {context.adopt(gradGates), context.adopt(gradCell * f),
             hasBias ? context.adopt(sumOverBatch(gradGates)) : at::Tensor()};
  });
  return grads;
}

std::tuple<at::Tensor, at::Tensor> gruCell(const at::Tensor& inputGates,
                                           const at::Tensor& hiddenGates, const at::Tensor& hx,
                                           const std::optional<at::Tensor>& inputBias,
                                           const std::optional<at::Tensor>& hiddenBias) {
  const c10::DeviceIndex device = inputGates.device().index();
  std::tuple<at::Tensor, at::Tensor> result;
  runOnDevice(device, [&] {
    KernelContext context(device);
    const auto in = withBias(inputGates, inputBias, context).chunk(3, 1);
    const auto hidden = withBias(hiddenGates, hiddenBias, context).chunk(3, 1);
    const at::Tensor r = (in[0] + hidden[0]).sigmoid();
    const at::Tensor z = (in[1] + hidden[1]).sigmoid();
    const at::Tensor n = (in[2] + r * hidden[2]).tanh();
    const at::Tensor h = context.alias(hx);
    const at::Tensor hy = n + z * (h - n);
    result = {context.adopt(hy), context.adopt(at::cat({r, z, n, hidden[2], h}, 1))};
  });
  return result;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gruCellBackward(
    const at::Tensor& gradHy, const at::Tensor& workspace, bool hasBias) {
  const c10::DeviceIndex device = workspace.device().index();
  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> grads;
  runOnDevice(device, [&] {
    KernelContext context(device);
    const auto saved = context.alias(workspace).chunk(5, 1);
    const at::Tensor &r = saved[0], &z = saved[1], &n = saved[2], &hiddenN = saved[3], &hx = saved[4];
    const at::Tensor gh = context.alias(gradHy);
    // hy = n + z * (hx - n);  n = tanh(in_n + r * hidden_n)
    const at::Tensor gradNPre = gh * (1 - z) * (1 - n * n);
    const at::Tensor gradZPre = gh * (hx - n) * z * (1 - z);
    const at::Tensor gradRPre = gradNPre * hiddenN * r * (1 - r);
    const at::Tensor gradInput = at::cat({gradRPre, gradZPre, gradNPre}, 1);
    const at::Tensor gradHidden = at::cat({gradRPre, gradZPre, gradNPre * r}, 1);
    grads = {context.adopt(gradInput), context.adopt(gradHidden), context.adopt(gh * z),
             hasBias ? context.adopt(sumOverBatch(gradInput)) : at::Tensor(),
             hasBias ? context.adopt(sumOverBatch(gradHidden)) : at::Tensor()};
  });
  return grads;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(lstmCell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(lstmCellBackward));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(gruCell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(gruCellBackward));
}

}  // namespace
}  // namespace torch_openreg
