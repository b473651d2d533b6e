// dropout.cpp — native_dropout drawing from the openreg device's generator.
//
// nn.Dropout on an accelerator calls native_dropout, whose CPU kernel draws
// its mask from the CPU's default generator inside the kernel: run through
// the fallback it would ignore torch.openreg.manual_seed and the openreg RNG
// state, and draw from a generator the host reads without waiting for queued
// kernels — so torch.utils.checkpoint, which saves and restores the device's
// RNG state to recompute the same masks, would recompute different ones.
// This kernel draws the mask from the device's default generator (its CPU
// engine, see integration/generator.h) on the stream, in stream order, like
// every other random operator of openreg; the rest is the CPU kernel's
// arithmetic.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/ones_like.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <vector>

#include "engine/functional_kernel.h"
#include "integration/generator.h"

namespace torch_openreg {
namespace {

// On CPU aliases: mask ~ Bernoulli(1 - p), output = input * mask / (1 - p).
std::vector<at::Tensor> dropoutWithEngine(const at::Tensor& input, double p,
                                          const at::Generator& engine) {
  const double keep = 1.0 - p;
  at::Tensor mask = at::empty_like(input, input.options().dtype(at::kBool));
  if (!input.is_meta()) mask.bernoulli_(keep, engine);  // planning on meta draws nothing
  const double scale = keep == 0 ? 0.0 : 1.0 / keep;  // p == 1: all dropped, no NaN
  return {input.mul(mask).mul_(scale), mask};
}

std::tuple<at::Tensor, at::Tensor> nativeDropout(const at::Tensor& input, double p,
                                                 std::optional<bool> train) {
  if (input.numel() == 0) return {input, at::empty_like(input)};
  if (train.has_value() && !*train) {
    return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  }
  const c10::DeviceIndex device = input.device().index();
  const at::Generator engine = engineOf(defaultGenerator(device));
  auto dropout = [p, engine](const std::vector<at::Tensor>& t) {
    return dropoutWithEngine(t[0], p, engine);
  };
  std::vector<at::Tensor> results =
      launchFunctional(device, {input}, dropout, {"native_dropout", {}});
  return {results[0], results[1]};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("native_dropout", TORCH_FN(nativeDropout)); }

}  // namespace
}  // namespace torch_openreg
