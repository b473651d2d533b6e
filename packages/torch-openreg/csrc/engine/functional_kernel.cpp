// functional_kernel.cpp — launching a functional native kernel.
//
// One call, in the engine's order: where it runs (launch_context), its plan
// (function_plan, plan), then either the synchronous run (synchronous_run) or,
// here, the asynchronous launch: the outputs are allocated on the device
// (tensor_layout), the CPU aliases recorded for the worker (kernel_context),
// and f launched (kernel_launch). On the worker, f runs on the aliases and its
// results land in the outputs (OutputReservations, kernel_allocator.h).
#include "engine/functional_kernel.h"

#include <memory>
#include <utility>

#include "engine/function_plan.h"
#include "engine/kernel_allocator.h"
#include "engine/kernel_context.h"
#include "engine/kernel_launch.h"
#include "engine/synchronous_run.h"
#include "engine/tensor_layout.h"

namespace torch_openreg {

std::vector<at::Tensor> launchFunctional(c10::DeviceIndex device, std::vector<at::Tensor> inputs,
                                         TensorFunction function,
                                         const FunctionSignature& signature) {
  LaunchSpec spec{LaunchContext::forDevice(device), signature.name, inputs};
  const PlanTicket ticket = planFunctionCall(signature, inputs, function);
  if (ticket.runsNow()) return runFunctionNow(spec, inputs, function, ticket);

  // The aliases are made on the worker (DeferredAliases): inputs, then outputs.
  std::shared_ptr<const Plan> plan = ticket.plan;
  std::vector<at::Tensor> outputs;
  DeferredAliases aliases;
  for (const at::Tensor& input : inputs) aliases.record(input);
  for (const Plan::Result& result : plan->results) {
    outputs.push_back(emptyWithLayout(result.layout, spec.context));
    aliases.record(outputs.back());
  }
  spec.writes = outputs;
  launchOnDevice(spec, [aliases = std::move(aliases), inputCount = inputs.size(),
                        function = std::move(function), plan] {
    const DeferredAliases::Made made = aliases.materialize();
    const std::vector<at::Tensor> inputAliases(made.begin(), made.begin() + inputCount);
    const c10::ArrayRef<at::Tensor> outputAliases =
        c10::ArrayRef<at::Tensor>(made).slice(inputCount);
    const OutputReservations reserved(outputAliases, &plan->placement);
    const std::vector<at::Tensor> results = function(inputAliases);
    for (size_t i = 0; i < outputAliases.size(); ++i) reserved.place(i, results[i]);
  });
  return outputs;
}

}  // namespace torch_openreg
