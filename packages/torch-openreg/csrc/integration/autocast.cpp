// autocast.cpp — CUDA's autocast policy, registered for AutocastPrivateUse1.
//
// PyTorch keeps the policy of CUDA autocast in shared lists
// (AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32, AT_FORALL_FP32_SET_OPT_DTYPE,
// AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE, AT_FORALL_PROMOTE in
// ATen/autocast_mode.h) "so that other backends can reuse" them, and ships the
// wrappers that implement each policy (at::autocast::WrapFunction, with the
// weight-cast cache in at::autocast::cached_cast). Expanding those lists with
// KERNEL_PRIVATEUSEONE gives openreg exactly CUDA's rules, and a new torch
// that edits the lists changes openreg on the next build with no edit here.
// CUDA also registers a few operators outside the lists; those are named at
// the end of the registration below, and
// tests/test_autocast_drift.py fails when torch adds, drops or moves any
// operator, comparing this table and its behaviour with CUDA's registrations.
#include "integration/autocast.h"

#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include <optional>

namespace torch_openreg {
namespace {

// AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE spells its signatures with ATen's
// unqualified type names.
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

using PolicyTable = std::vector<std::pair<std::string, std::string>>;

PolicyTable& mutablePolicyTable() {
  static PolicyTable table;
  return table;
}

// "conv_transpose2d, input" (the stringified macro arguments) -> "aten::conv_transpose2d.input".
std::string qualifiedName(const std::string& operatorAndOverload) {
  std::string name = "aten::";
  for (char c : operatorAndOverload) {
    if (c == ',') {
      name += '.';
    } else if (c != ' ') {
      name += c;
    }
  }
  return name;
}

void recordPolicy(const char* operatorAndOverload, const char* policy) {
  mutablePolicyTable().emplace_back(qualifiedName(operatorAndOverload), policy);
}

// CUDA's message, word for word: code written for CUDA may match on it.
at::Tensor binaryCrossEntropyBanned(const at::Tensor&, const at::Tensor&,
                                    const std::optional<at::Tensor>&, int64_t) {
  TORCH_CHECK(
      false,
      "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
      "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
      "In this case, combine the two layers using "
      "torch.nn.functional.binary_cross_entropy_with_logits\n"
      "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
      "safe to autocast.");
}

// Operators without a rule keep their dtypes: autocast passes them straight on.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

// One registration and one table entry per operator, for each policy.
#define OPENREG_AUTOCAST(POLICY, ...)       \
  KERNEL_PRIVATEUSEONE(__VA_ARGS__, POLICY) \
  recordPolicy(#__VA_ARGS__, #POLICY);
#define OPENREG_LOWER_PRECISION_FP(...) OPENREG_AUTOCAST(lower_precision_fp, __VA_ARGS__)
#define OPENREG_FP32(...) OPENREG_AUTOCAST(fp32, __VA_ARGS__)
#define OPENREG_FP32_SET_OPT_DTYPE(...) OPENREG_AUTOCAST(fp32_set_opt_dtype, __VA_ARGS__)
#define OPENREG_PROMOTE(...) OPENREG_AUTOCAST(promote, __VA_ARGS__)
#define OPENREG_REDISPATCH_WITH_DTYPE(FUNCTION, NAME, SIGNATURE, REDISPATCH_SIGNATURE, POLICY) \
  KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE(FUNCTION, NAME, SIGNATURE,               \
                                                      REDISPATCH_SIGNATURE, POLICY)            \
  recordPolicy(NAME, #POLICY);

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  // The shared lists, as CUDA expands them.
  AT_FORALL_LOWER_PRECISION_FP(OPENREG_LOWER_PRECISION_FP)
  AT_FORALL_FP32(OPENREG_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(OPENREG_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(OPENREG_REDISPATCH_WITH_DTYPE)
  AT_FORALL_PROMOTE(OPENREG_PROMOTE)

  // What CUDA's registration adds to the shared lists.
  // The cuDNN convolutions cannot run on openreg, but registering them keeps
  // the two operator sets identical, so the drift test needs no exceptions
  // for them (calling them fails in the kernel, as on any non-CUDA device).
  OPENREG_LOWER_PRECISION_FP(cudnn_convolution)
  OPENREG_LOWER_PRECISION_FP(cudnn_convolution_transpose)
  OPENREG_FP32(linalg_matrix_sqrth)
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(binaryCrossEntropyBanned));
  recordPolicy("binary_cross_entropy", "banned");
}

#undef OPENREG_REDISPATCH_WITH_DTYPE
#undef OPENREG_PROMOTE
#undef OPENREG_FP32_SET_OPT_DTYPE
#undef OPENREG_FP32
#undef OPENREG_LOWER_PRECISION_FP
#undef OPENREG_AUTOCAST

}  // namespace

const std::vector<std::pair<std::string, std::string>>& autocastPolicy() {
  return mutablePolicyTable();
}

}  // namespace torch_openreg
