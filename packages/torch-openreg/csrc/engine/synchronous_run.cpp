// synchronous_run.cpp — see synchronous_run.h.
#include "engine/synchronous_run.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "base/debug_modes.h"
#include "engine/fallback_arguments.h"
#include "engine/kernel_context.h"
#include "engine/kernel_launch.h"
#include "engine/tensor_layout.h"

namespace torch_openreg {
namespace {

using Arguments = std::vector<c10::IValue>;

std::vector<c10::IValue> runOnWorker(const c10::OperatorHandle& op, const Arguments& arguments,
                                     const LaunchSpec& spec) {
  const c10::FunctionSchema& schema = op.schema();
  std::vector<c10::IValue> results;
  runOnDevice(spec, [&] {
    KernelContext context(spec.context.device);
    torch::jit::Stack cpuStack;
    cpuStack.reserve(arguments.size());
    for (size_t i = 0; i < arguments.size(); ++i) {
      cpuStack.push_back(toCpuArgument(arguments[i], schema.arguments()[i], context));
    }
    op.redispatchBoxed(cpuKeysFor(arguments), &cpuStack);
    for (size_t i = 0; i < arguments.size(); ++i) {
      if (isMutable(schema.arguments()[i])) writeBackMutated(arguments[i], context);
    }
    for (size_t i = 0; i < cpuStack.size(); ++i) {
      std::optional<size_t> mutated = mutatedArgumentOf(schema, i);
      results.push_back(mutated ? arguments[*mutated] : fromCpuResult(cpuStack[i], context));
    }
  });
  return results;
}

// Layouts of the arguments the operator may mutate (undefined for the others).
std::vector<TensorLayout> mutableLayouts(const c10::OperatorHandle& op,
                                         const Arguments& arguments) {
  std::vector<TensorLayout> layouts(arguments.size());
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (isMutable(op.schema().arguments()[i]) && arguments[i].isTensor()) {
      layouts[i] = TensorLayout::of(arguments[i].toTensor());
    }
  }
  return layouts;
}

// The out= arguments whose layout the call changed (a first call tells the plan).
std::vector<std::pair<size_t, TensorLayout>> changedLayouts(const std::vector<TensorLayout>& before,
                                                            const Arguments& arguments) {
  std::vector<std::pair<size_t, TensorLayout>> changed;
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (!before[i].defined || !arguments[i].isTensor()) continue;
    const at::Tensor& tensor = arguments[i].toTensor();
    if (!before[i].matches(tensor)) changed.emplace_back(i, TensorLayout::of(tensor));
  }
  return changed;
}

// New results are written by the launch; results sharing memory with an
// argument (views, mutated arguments) were checked as arguments.
std::vector<at::Tensor> newResults(const Arguments& arguments,
                                   const std::vector<c10::IValue>& results) {
  std::vector<const void*> argumentMemory;
  for (const c10::IValue& argument : arguments) {
    forEachTensor(argument, [&](const at::Tensor& tensor) {
      if (tensor.defined() && tensor.has_storage())
        argumentMemory.push_back(tensor.storage().data());
    });
  }
  std::vector<at::Tensor> written;
  for (const c10::IValue& result : results) {
    forEachTensor(result, [&](const at::Tensor& tensor) {
      const bool fresh = tensor.defined() && tensor.has_storage() &&
                         std::find(argumentMemory.begin(), argumentMemory.end(),
                                   tensor.storage().data()) == argumentMemory.end();
      if (fresh) written.push_back(tensor);
    });
  }
  return written;
}

}  // namespace

std::vector<c10::IValue> runOperatorNow(const c10::OperatorHandle& op, const Arguments& arguments,
                                        const LaunchSpec& spec, const PlanTicket& ticket) {
  std::vector<TensorLayout> before;
  if (ticket.firstCall()) before = mutableLayouts(op, arguments);
  LaunchSpec run = spec;
  run.firstCall = ticket.firstCall();
  std::vector<c10::IValue> results = runOnWorker(op, arguments, run);
  if (ticket.firstCall()) confirmPlan(ticket, results, changedLayouts(before, arguments));
  if (debugModeOn(kDebugRaces)) recordLaunchResults(spec, newResults(arguments, results));
  return results;
}

std::vector<at::Tensor> runFunctionNow(const LaunchSpec& spec,
                                       const std::vector<at::Tensor>& inputs,
                                       const TensorFunction& function, const PlanTicket& ticket) {
  std::vector<at::Tensor> results;
  LaunchSpec run = spec;
  run.firstCall = ticket.firstCall();
  runOnDevice(run, [&] {
    KernelContext context(spec.context.device);
    std::vector<at::Tensor> aliases;
    aliases.reserve(inputs.size());
    for (const at::Tensor& input : inputs) aliases.push_back(context.alias(input));
    for (const at::Tensor& result : function(aliases)) results.push_back(context.adopt(result));
  });
  if (ticket.firstCall()) {
    const std::vector<c10::IValue> values(results.begin(), results.end());
    confirmPlan(ticket, values, {});
  }
  recordLaunchResults(spec, results);
  return results;
}

}  // namespace torch_openreg
