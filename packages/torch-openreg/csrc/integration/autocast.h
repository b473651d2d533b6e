// autocast.h — automatic mixed precision (torch.autocast("openreg")).
//
// Under autocast every operator of an openreg tensor first reaches the
// AutocastPrivateUse1 dispatch key. autocast.cpp registers a fallthrough for
// the whole key (operators without a rule run unchanged) and, for the
// operators CUDA's autocast handles, the same cast policy as CUDA: PyTorch's
// shared op lists (AT_FORALL_* in ATen/autocast_mode.h) expanded for
// PrivateUse1, plus the few operators CUDA registers outside those lists.
// The policy table below lets Python compare openreg's rules with CUDA's.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace torch_openreg {

// (operator, policy) for every operator with an autocast rule on openreg, e.g.
// ("aten::mm", "lower_precision_fp"), ("aten::norm.Scalar", "fp32_append_dtype"),
// ("aten::binary_cross_entropy", "banned"). Filled when _C is loaded.
const std::vector<std::pair<std::string, std::string>>& autocastPolicy();

}  // namespace torch_openreg
