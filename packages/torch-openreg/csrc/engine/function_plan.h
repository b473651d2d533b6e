// function_plan.h — planning a native kernel's call on meta shadows.
//
// The functional kernels' side of the planner (plan.h), as operator_plan.h is
// the boxed fallback's: f runs on data-free shadows of its inputs on the
// caller's thread, which tells the outputs' layouts; a function that cannot
// run on meta tensors gets a synchronous plan (its real run raises real
// errors).
#pragma once

#include <vector>

#include "engine/plan.h"
#include "engine/tensor_function.h"

namespace torch_openreg {

// The plan for calling `function` (identified by `signature`) with `inputs`.
PlanTicket planFunctionCall(const FunctionSignature& signature,
                            const std::vector<at::Tensor>& inputs, const TensorFunction& function);

}  // namespace torch_openreg
