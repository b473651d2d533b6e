// operator_plan.cpp — meta planning of boxed operator calls.
#include "engine/operator_plan.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "base/sync_debug.h"
#include "engine/fallback_arguments.h"
#include "engine/meta_shadow.h"
#include "engine/out_variant.h"

namespace torch_openreg {
namespace {

c10::IValue shadowArgument(const c10::IValue& value, const c10::Argument& argument,
                           MetaShadows& shadows) {
  if (value.isTensor() || value.isList()) {
    return mapTensors(value, [&](const at::Tensor& tensor) { return shadows.shadow(tensor); });
  }
  if (value.isDevice() && value.toDevice().type() == c10::DeviceType::PrivateUse1) {
    return c10::Device(c10::DeviceType::Meta);
  }
  if (isGeneratorType(argument.type())) return c10::IValue();  // meta kernels draw nothing
  return value;
}

class SilentWarnings final : public c10::WarningHandler {
 public:
  void process(const c10::Warning& /*warning*/) override {}
};

// Runs the meta kernel; false if it raised (no meta kernel, a data-dependent
// shape, or an invalid call: the synchronous path raises the real error).
bool runOnMeta(const c10::OperatorHandle& op, torch::jit::Stack& stack) {
  // Planning is a probe: its warnings are not the user's (the first call runs
  // the real kernel synchronously, whose warnings are reported).
  SilentWarnings silent;
  c10::WarningUtils::WarningHandlerGuard quiet(&silent);
  try {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &stack);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// The results as plan entries; false for a result the plan cannot describe
// (a non-tensor value the caller needs now, or a view).
bool describeResults(const c10::FunctionSchema& schema, const torch::jit::Stack& stack,
                     const MetaShadows& shadows, Plan& plan) {
  c10::SmallVector<const c10::StorageImpl*, 4> outputStorages;
  // A new output of its own: strided (not e.g. to_sparse()'s), sharing memory
  // with neither an argument nor another output.
  const auto fresh = [&](const at::Tensor& output) {
    if (!output.defined()) return true;
    if (output.layout() != c10::kStrided) return false;
    const c10::StorageImpl* storage = output.storage().unsafeGetStorageImpl();
    const bool shared =
        std::find(outputStorages.begin(), outputStorages.end(), storage) != outputStorages.end();
    if (shadows.aliasesShadow(output) || shared) return false;
    outputStorages.push_back(storage);
    return true;
  };
  for (size_t i = 0; i < stack.size(); ++i) {
    Plan::Result result;
    if (std::optional<size_t> mutated = mutatedArgumentOf(schema, i)) {
      result.mutatedArgument = static_cast<int>(*mutated);
    } else if (stack[i].isTensorList()) {  // e.g. _foreach_sqrt
      result.list = true;
      for (const at::Tensor& element : stack[i].toTensorList()) {
        if (!element.defined() || !fresh(element)) return false;
        result.elements.push_back(TensorLayout::of(element));
      }
    } else {
      if (!stack[i].isTensor() || !fresh(stack[i].toTensor())) return false;
      result.layout = TensorLayout::of(stack[i].toTensor());
    }
    plan.results.push_back(std::move(result));
  }
  return true;
}

// out= arguments the meta kernel resized.
void describeArgumentLayouts(const c10::FunctionSchema& schema,
                             c10::ArrayRef<c10::IValue> arguments,
                             c10::ArrayRef<c10::IValue> shadowed, Plan& plan) {
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (!isMutable(schema.arguments()[i]) || !arguments[i].isTensor()) continue;
    const at::Tensor& original = arguments[i].toTensor();
    const at::Tensor& meta = shadowed[i].toTensor();
    if (original.defined() && !TensorLayout::of(meta).matches(original)) {
      plan.argumentLayouts.emplace_back(i, TensorLayout::of(meta));
    }
  }
}

bool mutatesArguments(const c10::FunctionSchema& schema) {
  return std::any_of(schema.arguments().begin(), schema.arguments().end(),
                     [](const c10::Argument& argument) { return isMutable(argument); });
}

}  // namespace

void planOperatorOnMeta(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> arguments,
                        Plan& plan) {
  // Nested and sparse kernels run synchronously: their results' members and
  // sizes depend on the data (and few have meta kernels).
  if (hasNestedTensor(arguments) || hasSparseTensor(arguments)) return plan.makeSynchronous();
  const c10::FunctionSchema& schema = op.schema();
  MetaShadows shadows;
  torch::jit::Stack stack;
  stack.reserve(arguments.size());
  for (size_t i = 0; i < arguments.size(); ++i) {
    stack.push_back(shadowArgument(arguments[i], schema.arguments()[i], shadows));
  }
  const std::vector<c10::IValue> shadowed(stack.begin(), stack.end());
  if (!runOnMeta(op, stack) || !describeResults(schema, stack, shadows, plan)) {
    return plan.makeSynchronous();
  }
  describeArgumentLayouts(schema, arguments, shadowed, plan);
  // out= kernels only for purely functional operators: retrying one that
  // failed must not repeat side effects on mutated arguments.
  if (plan.newOutputCount() > 0 && !mutatesArguments(schema)) plan.outVariant = outVariantOf(op);
}

namespace {

// Advanced indexing synchronizes on CUDA only when an index is a boolean
// mask (it becomes nonzero's result); integer indices do not.
bool indexesWithMask(const c10::ArrayRef<c10::IValue> arguments) {
  if (arguments.size() < 2 || !arguments[1].isList()) return false;
  for (const c10::IValue& index : arguments[1].toListRef()) {
    if (!index.isTensor()) continue;
    const c10::ScalarType type = index.toTensor().scalar_type();
    if (type == c10::kBool || type == c10::kByte) return true;
  }
  return false;
}

// Operators whose results need the device's data on the host — a value
// (.item(), equal) or a size (nonzero, masked_select, unique): ATen tags them,
// and they synchronize on CUDA too. Other synchronous plans (views, operators
// without a meta kernel, first calls) are this backend's choice, not a
// synchronization the program asked for.
bool resultNeedsDeviceData(const c10::OperatorHandle& op,
                           const c10::ArrayRef<c10::IValue> arguments) {
  const std::string& name = op.schema().name();
  if (name == "aten::index" || name == "aten::index_put" || name == "aten::index_put_" ||
      name == "aten::_index_put_impl_") {
    return indexesWithMask(arguments);
  }
  return op.hasTag(at::Tag::dynamic_output_shape) || op.hasTag(at::Tag::data_dependent_output);
}

}  // namespace

std::string dataDependentSynchronization(const c10::OperatorHandle& op,
                                         const c10::ArrayRef<c10::IValue> arguments) {
  if (syncDebugMode() == SyncDebugMode::Default || !resultNeedsDeviceData(op, arguments)) return {};
  return op.schema().operator_name().name + " (its result depends on tensor data)";
}

PlanTicket planOperatorCall(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> arguments) {
  const MetaPlanner planner = [&](Plan& plan) { planOperatorOnMeta(op, arguments, plan); };
  return lookUpPlan(PlanKey::forOperator(op, arguments), planner);
}

}  // namespace torch_openreg
