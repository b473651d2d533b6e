// attention.cpp — which scaled_dot_product_attention backend openreg runs.
//
// F.scaled_dot_product_attention asks the device's _fused_sdp_choice_stub
// which kernel to run (flash, memory-efficient, math, ...), and takes the math
// path on a device without one — ignoring both the CPU's fused kernels and
// torch.nn.attention.sdpa_kernel() restrictions. openreg runs the CPU's
// kernels, so it asks the CPU's own selection (the CPU kernel of the
// _fused_sdp_choice operator): the same inputs pick the same
// backend (the CPU flash kernel for float, double, half and bfloat16 where its
// conditions hold), the chosen kernel then runs through the fallback like any
// CPU operator (_scaled_dot_product_flash_attention_for_cpu and its backward),
// and a call that no allowed backend accepts raises the CPU's "No viable
// backend" error. The selection reads only shapes, dtypes, strides and flags,
// never tensor data, so it runs on the caller's thread.
#include <ATen/core/Tensor.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_ops.h>
#include <torch/library.h>

#include <optional>

namespace torch_openreg {
namespace {

int64_t chooseAttentionBackend(const at::Tensor& query, const at::Tensor& key,
                               const at::Tensor& value,
                               const std::optional<at::Tensor>& attentionMask, double dropout,
                               bool isCausal, std::optional<double> scale, bool enableGqa) {
  return at::_ops::_fused_sdp_choice::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), query,
                                                 key, value, attentionMask, dropout, isCausal,
                                                 scale, enableGqa);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // The operator form (torch._fused_sdp_choice) answers without a device round trip.
  m.impl("_fused_sdp_choice", TORCH_FN(chooseAttentionBackend));
}

}  // namespace
}  // namespace torch_openreg

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_openreg::chooseAttentionBackend)
}  // namespace at::native
