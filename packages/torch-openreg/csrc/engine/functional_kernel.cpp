// functional_kernel.cpp — planning and launch of functional native kernels.
#include "engine/functional_kernel.h"

#include <exception>
#include <memory>
#include <utility>

#include "base/debug_modes.h"
#include "engine/kernel_allocator.h"
#include "engine/kernel_context.h"
#include "engine/kernel_launch.h"
#include "engine/meta_shadow.h"
#include "engine/operator_errors.h"
#include "engine/plan.h"
#include "engine/race_detector.h"

namespace torch_openreg {
namespace {

void planFunctionOnMeta(const std::vector<at::Tensor>& inputs, const TensorFunction& function,
                        Plan& plan) {
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

std::vector<at::Tensor> runNow(const LaunchContext& launch, const std::vector<at::Tensor>& inputs,
                               const TensorFunction& function) {
  std::vector<at::Tensor> results;
  runOnDevice(launch, [&] {
    KernelContext context(launch.device);
    std::vector<at::Tensor> aliases;
    aliases.reserve(inputs.size());
    for (const at::Tensor& input : inputs) aliases.push_back(context.alias(input));
    for (const at::Tensor& result : function(aliases)) results.push_back(context.adopt(result));
  });
  if (debugModeOn(kDebugRaces)) recordResults("native kernel", launch.stream, results);
  return results;
}

std::vector<at::Tensor> runFirstCall(const LaunchContext& launch,
                                     const std::vector<at::Tensor>& inputs,
                                     const TensorFunction& function, const PlanTicket& ticket) {
  std::vector<at::Tensor> results = runNow(launch, inputs, function);
  const std::vector<c10::IValue> values(results.begin(), results.end());
  confirmPlan(ticket, values, {});
  return results;
}

}  // namespace

std::vector<at::Tensor> launchFunctional(c10::DeviceIndex device, std::vector<at::Tensor> inputs,
                                         TensorFunction function,
                                         const FunctionSignature& signature) {
  const PlanTicket ticket =
      lookUpPlan(PlanKey::forFunction(signature.name, signature.parameters, inputs),
                 [&](Plan& plan) { planFunctionOnMeta(inputs, function, plan); });
  const LaunchContext launch = LaunchContext::forDevice(device);
  if (debugModeOn(kDebugRaces)) checkLaunch(signature.name, launch.stream, inputs, {});
  if (ticket.firstCall()) return runFirstCall(launch, inputs, function, ticket);
  if (ticket.plan->synchronous) return runNow(launch, inputs, function);

  // The aliases are made on the worker (DeferredAliases): inputs, then outputs.
  std::shared_ptr<const Plan> plan = ticket.plan;
  DeferredAliases aliases;
  std::vector<at::Tensor> outputs;
  for (const at::Tensor& input : inputs) aliases.record(input);
  for (const Plan::Result& result : plan->results) {
    outputs.push_back(emptyWithLayout(result.layout, launch));
    aliases.record(outputs.back());
  }
  launchOnDevice(launch, [aliases = std::move(aliases), inputCount = inputs.size(),
                          function = std::move(function), plan, name = signature.name] {
    runNamingOperator([name] { return name; },
                      [&] {
                        const c10::SmallVector<at::Tensor, 4> made = aliases.materialize();
                        const std::vector<at::Tensor> inputAliases(made.begin(),
                                                                   made.begin() + inputCount);
                        const c10::ArrayRef<at::Tensor> outputAliases =
                            c10::ArrayRef<at::Tensor>(made).slice(inputCount);
                        const OutputReservations reserved(outputAliases, &plan->placement);
                        const std::vector<at::Tensor> results = function(inputAliases);
                        for (size_t i = 0; i < outputAliases.size(); ++i)
                          reserved.place(i, results[i]);
                      });
  });
  if (debugModeOn(kDebugRaces)) recordResults(signature.name, launch.stream, outputs);
  return outputs;
}

}  // namespace torch_openreg
