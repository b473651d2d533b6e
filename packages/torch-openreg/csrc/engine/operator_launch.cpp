// operator_launch.cpp — see operator_launch.h.
#include "engine/operator_launch.h"

#include <ATen/EmptyTensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "engine/fallback_arguments.h"
#include "engine/kernel_allocator.h"
#include "engine/kernel_context.h"
#include "engine/kernel_launch.h"
#include "engine/out_variant.h"
#include "engine/tensor_layout.h"

namespace torch_openreg {
namespace {

using Arguments = std::vector<c10::IValue>;

// out= arguments that the operator resizes get their new layout now, so the
// kernel finds them ready (and the caller sees the final sizes at once).
void applyArgumentLayouts(const Plan& plan, const Arguments& arguments) {
  for (const auto& [index, layout] : plan.argumentLayouts) {
    const at::Tensor& tensor = arguments[index].toTensor();
    tensor.resize_(layout.sizes);
    tensor.as_strided_(layout.sizes, layout.strides, layout.storageOffset);
  }
}

// An operator call ready to run on the stream worker. It holds descriptors
// of the CPU aliases it runs on (DeferredAliases: the worker makes them when
// the kernel runs, which keeps that cost off the caller's thread). They do
// not own device memory, so device memory keeps the caller's lifetime and is
// reused in stream order, as with CUDA's caching allocator, and the
// arguments' layouts are those of the moment of the call.
struct PreparedKernel {
  c10::OperatorHandle op;
  std::shared_ptr<const Plan> plan;
  c10::DispatchKeySet keys;
  bool useOutVariant = false;
  // The CPU arguments with placeholders where the aliases go (recordCpuArgument).
  std::vector<c10::IValue> argumentShapes;
  // The arguments' tensors in order, then the preallocated outputs.
  DeferredAliases aliases;
  size_t firstOutput = 0;
  // Entries of the arguments the operator writes in place.
  c10::SmallVector<size_t, 2> mutated;

  void run() const {
    const DeferredAliases::Made made = aliases.materialize();
    std::vector<c10::IValue> arguments;
    arguments.reserve(argumentShapes.size());
    size_t next = 0;
    for (const c10::IValue& shape : argumentShapes) {
      arguments.push_back(fillCpuArgument(shape, made, next));
    }
    const c10::ArrayRef<at::Tensor> outputs = c10::ArrayRef<at::Tensor>(made).slice(firstOutput);
    if (!useOutVariant || !runOutVariant(arguments, outputs)) {
      runFunctional(std::move(arguments), outputs);
    }
    checkMutatedLayouts(made);
  }

 private:
  const TensorLayout& outputLayout(size_t index) const {
    return aliases.layout(firstOutput + index);
  }
  void* outputData(size_t index) const { return aliases.memory(firstOutput + index).first; }

  // Writes straight into the outputs. Some out= kernels do not match their
  // functional form (they resize the out tensor, or expect another shape):
  // then this reports false, and the signature is not run that way again.
  bool runOutVariant(const std::vector<c10::IValue>& arguments,
                     c10::ArrayRef<at::Tensor> outputs) const {
    if (!plan->outVariantFits.load(std::memory_order_relaxed)) return false;
    torch::jit::Stack stack(arguments.begin(), arguments.end());
    for (const at::Tensor& output : outputs) stack.emplace_back(output);
    try {
      plan->outVariant->redispatchBoxed(keys, &stack);
    } catch (const std::exception&) {
      // Retried in functional form, which raises again if the call is invalid.
      plan->outVariantFits.store(false, std::memory_order_relaxed);
      return false;
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (!outputLayout(i).matches(outputs[i]) || outputs[i].storage().data() != outputData(i)) {
        plan->outVariantFits.store(false, std::memory_order_relaxed);
        return false;
      }
    }
    return true;
  }

  // Takes the arguments: the stack they become is the results' too.
  void runFunctional(torch::jit::Stack results, c10::ArrayRef<at::Tensor> outputs) const {
    c10::SmallVector<at::Tensor, 2> targets;
    for (size_t i = 0; i < outputs.size(); ++i) {
      targets.push_back(outputs[i].defined() ? pristineOutput(i, outputs[i]) : at::Tensor());
    }
    const OutputReservations reserved(targets, &plan->placement);
    op.redispatchBoxed(keys, &results);
    size_t next = 0;  // outputs are in result order, list elements one by one
    const auto place = [&](const at::Tensor& result) {
      const size_t index = next++;
      if (targets[index].defined()) reserved.place(index, result);
    };
    for (size_t i = 0; i < results.size(); ++i) {
      if (mutatedArgumentOf(op.schema(), i)) continue;
      if (!results[i].isTensorList()) {
        place(results[i].toTensor());
        continue;
      }
      for (const at::Tensor& element : results[i].toTensorList()) place(element);
    }
  }

  // An out= kernel that failed may have re-pointed an output alias to memory
  // of its own: the functional result must land in the preallocated memory.
  at::Tensor pristineOutput(size_t index, const at::Tensor& output) const {
    const TensorLayout& layout = outputLayout(index);
    const auto [data, bytes] = aliases.memory(firstOutput + index);
    if (output.storage().data() == data && layout.matches(output)) return output;
    c10::Storage storage(c10::Storage::use_byte_size_t(), bytes,
                         c10::DataPtr(data, c10::Device(c10::DeviceType::CPU)), nullptr, false);
    return tensorOver(std::move(storage), c10::DispatchKey::CPU, layout);
  }

  void checkMutatedLayouts(c10::ArrayRef<at::Tensor> made) const {
    for (const size_t index : mutated) {
      TORCH_CHECK(
          aliases.layout(index).matches(made[index]), "openreg: the CPU kernel of ",
          op.schema().name(),
          " changed the shape or strides of an argument it writes in place, which openreg "
          "cannot do asynchronously; please report this operator (it needs a native kernel)");
    }
  }
};

// Host tensors are read when the kernel runs; like CUDA (which passes scalars
// and copies host indices at launch), take their values now, so later changes
// by the caller do not leak into queued work.
bool isUserHostTensor(const at::Tensor& tensor) {
  return tensor.defined() && tensor.is_cpu() && !tensor.unsafeGetTensorImpl()->is_wrapped_number();
}

bool hasHostTensors(const Arguments& arguments) {
  bool found = false;
  for (const c10::IValue& value : arguments) {
    forEachTensor(value,
                  [&](const at::Tensor& tensor) { found = found || isUserHostTensor(tensor); });
  }
  return found;
}

// The arguments with host tensors cloned; nothing when there are none.
std::optional<Arguments> snapshotHostTensors(const Arguments& arguments) {
  if (!hasHostTensors(arguments)) return std::nullopt;
  Arguments snapshot;
  snapshot.reserve(arguments.size());
  for (const c10::IValue& value : arguments) {
    snapshot.push_back(mapTensors(value, [](const at::Tensor& tensor) {
      return isUserHostTensor(tensor) ? tensor.clone() : tensor;
    }));
  }
  return snapshot;
}

// Records the call for the worker: no alias is made here (see PreparedKernel).
std::shared_ptr<PreparedKernel> prepare(const c10::OperatorHandle& op, const Arguments& arguments,
                                        c10::ArrayRef<at::Tensor> outputs, c10::DeviceIndex device,
                                        std::shared_ptr<const Plan> plan) {
  const c10::FunctionSchema& schema = op.schema();
  auto kernel =
      std::make_shared<PreparedKernel>(PreparedKernel{op, std::move(plan), cpuKeysFor(arguments)});
  kernel->argumentShapes.reserve(arguments.size());
  size_t tensors = outputs.size();
  for (const c10::IValue& argument : arguments) {
    tensors += argument.isTensor() ? 1 : argument.isList() ? argument.toListRef().size() : 0;
  }
  kernel->aliases.reserve(tensors);
  for (size_t i = 0; i < arguments.size(); ++i) {
    kernel->argumentShapes.push_back(
        recordCpuArgument(arguments[i], schema.arguments()[i], kernel->aliases, device));
    if (isMutable(schema.arguments()[i]) && arguments[i].isTensor() &&
        arguments[i].toTensor().defined()) {
      kernel->mutated.push_back(kernel->aliases.size() - 1);
    }
  }
  const bool allDefined =
      std::all_of(outputs.begin(), outputs.end(), [](const at::Tensor& t) { return t.defined(); });
  kernel->useOutVariant = kernel->plan->outVariant.has_value() && !outputs.empty() && allDefined;
  kernel->firstOutput = kernel->aliases.size();
  for (const at::Tensor& output : outputs) kernel->aliases.record(output);
  return kernel;
}

}  // namespace

std::vector<c10::IValue> launchOperator(const c10::OperatorHandle& op, const Arguments& arguments,
                                        const LaunchSpec& spec, std::shared_ptr<const Plan> plan) {
  const LaunchContext& launch = spec.context;
  applyArgumentLayouts(*plan, arguments);
  std::vector<c10::IValue> results;
  c10::SmallVector<at::Tensor, 2> outputs;
  for (const Plan::Result& result : plan->results) {
    if (result.mutatedArgument >= 0) {
      results.push_back(arguments[result.mutatedArgument]);
    } else if (result.list) {
      c10::List<at::Tensor> list;
      list.reserve(result.elements.size());
      for (const TensorLayout& layout : result.elements) {
        outputs.push_back(emptyWithLayout(layout, launch));
        list.push_back(outputs.back());
      }
      results.emplace_back(std::move(list));
    } else {
      outputs.push_back(emptyWithLayout(result.layout, launch));
      results.emplace_back(outputs.back());
    }
  }
  const std::optional<Arguments> snapshot = snapshotHostTensors(arguments);
  auto kernel =
      prepare(op, snapshot ? *snapshot : arguments, outputs, launch.device, std::move(plan));
  LaunchSpec writingOutputs = spec;
  writingOutputs.writes = outputs;
  launchOnDevice(writingOutputs, [kernel] { kernel->run(); });
  return results;
}

}  // namespace torch_openreg
