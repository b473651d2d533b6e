// function_plan.cpp — see function_plan.h.
#include "engine/function_plan.h"

#include <exception>

#include "engine/meta_shadow.h"
#include "engine/tensor_layout.h"

namespace torch_openreg {
namespace {

void planOnMeta(const std::vector<at::Tensor>& inputs, const TensorFunction& function, Plan& plan) {
  MetaShadows shadows;
  std::vector<at::Tensor> metaInputs;
  metaInputs.reserve(inputs.size());
  for (const at::Tensor& input : inputs) metaInputs.push_back(shadows.shadow(input));
  try {
    for (const at::Tensor& output : function(metaInputs)) {
      plan.results.push_back(Plan::Result{-1, TensorLayout::of(output)});
    }
  } catch (const std::exception&) {
    plan.makeSynchronous();  // no meta form: the synchronous run raises real errors
  }
}

}  // namespace

PlanTicket planFunctionCall(const FunctionSignature& signature,
                            const std::vector<at::Tensor>& inputs, const TensorFunction& function) {
  const MetaPlanner planner = [&](Plan& plan) { planOnMeta(inputs, function, plan); };
  return lookUpPlan(PlanKey::forFunction(signature.name, signature.parameters, inputs), planner);
}

}  // namespace torch_openreg
