// fallback.cpp — the boxed fallback for PrivateUse1 (see fallback.h).
//
// Two paths run an operator's CPU kernel on device memory:
//  * asynchronous (the common case): the operator first runs on meta shadows
//    of its arguments on the caller's thread, which validates the call and
//    gives the outputs' layout; the outputs are allocated on the device, and
//    the CPU kernel (its out= overload when there is one) is enqueued on the
//    current stream to fill them. The caller continues at once.
//  * synchronous: for what cannot be known before the kernel runs — results
//    that are not tensors (.item()-like), data-dependent shapes (nonzero,
//    masked_select), results aliasing inputs, nested tensors, operators
//    without a meta kernel. The kernel runs after all queued work and the
//    caller waits, as CUDA does for such operators.
#include "engine/fallback.h"

#include <ATen/EmptyTensor.h>
#include <ATen/native/CPUFallback.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "base/debug_modes.h"
#include "base/device.h"
#include "base/environment.h"
#include "base/sync_debug.h"
#include "engine/fallback_arguments.h"
#include "engine/kernel_allocator.h"
#include "engine/kernel_context.h"
#include "engine/kernel_launch.h"
#include "engine/launch_context.h"
#include "engine/operator_errors.h"
#include "engine/operator_plan.h"
#include "engine/plan.h"
#include "engine/race_detector.h"
#include "engine/tensor_layout.h"
#include "integration/device_allocator.h"

namespace torch_openreg {
namespace {

using Arguments = std::vector<c10::IValue>;

// ---- Synchronous path --------------------------------------------------------

std::vector<c10::IValue> runSynchronously(const c10::OperatorHandle& op, const Arguments& arguments,
                                          const LaunchContext& launch) {
  const c10::FunctionSchema& schema = op.schema();
  std::vector<c10::IValue> results;
  runOnDevice(launch, [&] {
    KernelContext context(launch.device);
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

// ---- Asynchronous path -------------------------------------------------------

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
    runNamingOperator([this] { return c10::toString(op.operator_name()); },
                      [this] { runKernel(); });
  }

 private:
  void runKernel() const {
    const c10::SmallVector<at::Tensor, 4> made = aliases.materialize();
    std::vector<c10::IValue> arguments;
    arguments.reserve(argumentShapes.size());
    size_t next = 0;
    for (const c10::IValue& shape : argumentShapes) {
      arguments.push_back(fillCpuArgument(shape, made, next));
    }
    const c10::ArrayRef<at::Tensor> outputs = c10::ArrayRef<at::Tensor>(made).slice(firstOutput);
    if (!useOutVariant || !runOutVariant(arguments, outputs)) runFunctional(arguments, outputs);
    checkMutatedLayouts(made);
  }

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

  void runFunctional(const std::vector<c10::IValue>& arguments,
                     c10::ArrayRef<at::Tensor> outputs) const {
    c10::SmallVector<at::Tensor, 2> targets;
    for (size_t i = 0; i < outputs.size(); ++i) {
      targets.push_back(outputs[i].defined() ? pristineOutput(i, outputs[i]) : at::Tensor());
    }
    const OutputReservations reserved(targets, &plan->placement);
    torch::jit::Stack results(arguments.begin(), arguments.end());
    op.redispatchBoxed(keys, &results);
    size_t next = 0;
    for (size_t i = 0; i < results.size(); ++i) {
      if (mutatedArgumentOf(op.schema(), i)) continue;
      const size_t index = next++;
      if (targets[index].defined()) reserved.place(index, results[i].toTensor());
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
    mapTensors(value, [&](const at::Tensor& tensor) {
      found = found || isUserHostTensor(tensor);
      return tensor;
    });
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

std::vector<c10::IValue> launchPlanned(const c10::OperatorHandle& op, const Arguments& arguments,
                                       const LaunchContext& launch,
                                       std::shared_ptr<const Plan> plan) {
  applyArgumentLayouts(*plan, arguments);
  std::vector<c10::IValue> results;
  c10::SmallVector<at::Tensor, 2> outputs;
  for (const Plan::Result& result : plan->results) {
    if (result.mutatedArgument >= 0) {
      results.push_back(arguments[result.mutatedArgument]);
    } else {
      outputs.push_back(emptyWithLayout(result.layout, launch));
      results.emplace_back(outputs.back());
    }
  }
  const std::optional<Arguments> snapshot = snapshotHostTensors(arguments);
  auto kernel =
      prepare(op, snapshot ? *snapshot : arguments, outputs, launch.device, std::move(plan));
  launchOnDevice(launch, [kernel] { kernel->run(); });
  return results;
}

// ---- First call of a signature -----------------------------------------------

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

std::vector<c10::IValue> runFirstCall(const c10::OperatorHandle& op, const Arguments& arguments,
                                      const LaunchContext& launch, const PlanTicket& ticket) {
  const std::vector<TensorLayout> before = mutableLayouts(op, arguments);
  std::vector<c10::IValue> results = runSynchronously(op, arguments, launch);
  std::vector<std::pair<size_t, TensorLayout>> changed;
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (!before[i].defined || !arguments[i].isTensor()) continue;
    const at::Tensor& tensor = arguments[i].toTensor();
    if (!before[i].matches(tensor)) changed.emplace_back(i, TensorLayout::of(tensor));
  }
  confirmPlan(ticket, results, std::move(changed));
  return results;
}

// ---- Sync debug mode -----------------------------------------------------------

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

void checkDataDependentCall(const c10::OperatorHandle& op,
                            const c10::ArrayRef<c10::IValue> arguments) {
  if (syncDebugMode() == SyncDebugMode::Default || !resultNeedsDeviceData(op, arguments)) return;
  const std::string what =
      op.schema().operator_name().name + " (its result depends on tensor data)";
  checkSynchronization(what.c_str());
}

// ---- Race detection (OPENREG_DEBUG=races) ------------------------------------

// The schema says what an operator does with its tensors: arguments it
// mutates are written, other tensor arguments read.
void checkOperatorAccesses(const c10::OperatorHandle& op, const Arguments& arguments,
                           const c10::Stream& stream) {
  std::vector<at::Tensor> reads, writes;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const bool write = isMutable(op.schema().arguments()[i]);
    mapTensors(arguments[i], [&](const at::Tensor& tensor) {
      (write ? writes : reads).push_back(tensor);
      return tensor;
    });
  }
  checkLaunch(c10::toString(op.operator_name()), stream, reads, writes);
}

// New results are written by the launch; results sharing memory with an
// argument (views, mutated arguments) were checked as arguments.
void recordNewResults(const c10::OperatorHandle& op, const Arguments& arguments,
                      const std::vector<c10::IValue>& results, const c10::Stream& stream) {
  std::vector<const void*> argumentMemory;
  for (const c10::IValue& argument : arguments) {
    mapTensors(argument, [&](const at::Tensor& tensor) {
      if (tensor.defined() && tensor.has_storage())
        argumentMemory.push_back(tensor.storage().data());
      return tensor;
    });
  }
  std::vector<at::Tensor> written;
  for (const c10::IValue& result : results) {
    mapTensors(result, [&](const at::Tensor& tensor) {
      const bool fresh = tensor.defined() && tensor.has_storage() &&
                         std::find(argumentMemory.begin(), argumentMemory.end(),
                                   tensor.storage().data()) == argumentMemory.end();
      if (fresh) written.push_back(tensor);
      return tensor;
    });
  }
  recordResults(c10::toString(op.operator_name()), stream, written);
}

// ---- Dispatch ----------------------------------------------------------------

void runInPlace(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t argumentCount = op.schema().arguments().size();
  Arguments arguments(stack->end() - argumentCount, stack->end());
  const LaunchContext launch = LaunchContext::forDevice(findDevice(op, arguments));
  const PlanTicket ticket = planOperatorCall(op, arguments);
  checkDataDependentCall(op, arguments);
  const bool checkRaces = debugModeOn(kDebugRaces);
  if (checkRaces) checkOperatorAccesses(op, arguments, launch.stream);
  std::vector<c10::IValue> results;
  if (ticket.firstCall()) {
    results = runFirstCall(op, arguments, launch, ticket);
  } else if (ticket.plan->synchronous) {
    results = runSynchronously(op, arguments, launch);
  } else {
    results = launchPlanned(op, arguments, launch, ticket.plan);
  }
  if (checkRaces) recordNewResults(op, arguments, results, launch.stream);
  torch::jit::drop(*stack, argumentCount);
  for (c10::IValue& result : results) stack->push_back(std::move(result));
}

FallbackMode readFallbackMode() {
  const std::string value =
      environmentChoice("OPENREG_FALLBACK", {"inplace", "copy"}, "inplace",
                        "'inplace' runs CPU kernels on device memory, the default; 'copy' copies "
                        "through the host as PyTorch's reference OpenReg does, for comparison");
  return value == "copy" ? FallbackMode::Copy : FallbackMode::InPlace;
}

}  // namespace

FallbackMode fallbackMode() {
  static const FallbackMode mode = readFallbackMode();
  return mode;
}

std::string fallbackModeName() { return fallbackMode() == FallbackMode::Copy ? "copy" : "inplace"; }

void openregFallback(const c10::OperatorHandle& op, c10::DispatchKeySet /*keys*/,
                     torch::jit::Stack* stack) {
  const size_t argumentCount = op.schema().arguments().size();
  const c10::ArrayRef<c10::IValue> arguments(stack->data() + stack->size() - argumentCount,
                                             argumentCount);
  // cpu_fallback copies dense tensors only: sparse ones run in place.
  if (fallbackMode() == FallbackMode::Copy && !hasSparseTensor(arguments)) {
    // The same device rules as the default mode (cpu_fallback would copy
    // tensors of any devices to the host without complaint).
    findDevice(op, arguments);
    checkDataDependentCall(op, arguments);
    // Its copies through the host are how this mode runs every operator.
    SyncDebugPause copiesAreInternal;
    at::native::cpu_fallback(op, stack);
    return;
  }
  runInPlace(op, stack);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&openregFallback>());
}

// Unary and binary operators: at most two tensor arguments and no tensor
// lists. For them the fallback's device rule (0-dim CPU tensors may mix) is
// TensorIterator's, so the generic out=-based kernel can be skipped.
bool unaryOrBinary(const c10::FunctionSchema& schema) {
  int tensors = 0;
  for (const c10::Argument& argument : schema.arguments()) {
    const c10::TypePtr& type = argument.type();
    if (type->kind() == c10::TypeKind::ListType) {
      if (type->containedType(0)->kind() == c10::TypeKind::TensorType ||
          type->containedType(0)->kind() == c10::TypeKind::OptionalType) {
        return false;
      }
      continue;
    }
    if (type->kind() == c10::TypeKind::TensorType ||
        (type->kind() == c10::TypeKind::OptionalType &&
         type->containedType(0)->kind() == c10::TypeKind::TensorType)) {
      ++tensors;
    }
  }
  return tensors <= 2;
}

// Sparse openreg tensors: every operator with a sparse CPU kernel runs it
// through the fallback. Without a direct registration, PyTorch would pick a
// generic kernel (CompositeExplicitAutogradNonFunctional covers the sparse
// compressed keys too, e.g. for mul) over the sparse fallback, and that
// kernel rejects sparse layouts.
size_t preferCpuSparseKernels(c10::DispatchKey cpuKey, c10::DispatchKey deviceKey,
                              torch::Library& library) {
  size_t registered = 0;
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findOp(name);
    if (!op || !op->hasSchema() || !op->hasKernelForDispatchKey(cpuKey) ||
        op->hasKernelForDispatchKey(deviceKey)) {
      continue;
    }
    const std::string bare = name.name.substr(6);  // without "aten::"
    const std::string qualified =
        name.overload_name.empty() ? bare : bare + "." + name.overload_name;
    library.impl(qualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&openregFallback>());
    ++registered;
  }
  return registered;
}

size_t preferCpuKernels() {
  static auto* sparse = new torch::Library(torch::Library::IMPL, "aten",
                                           c10::DispatchKey::SparsePrivateUse1, __FILE__, __LINE__);
  static auto* compressed = new torch::Library(
      torch::Library::IMPL, "aten", c10::DispatchKey::SparseCsrPrivateUse1, __FILE__, __LINE__);
  const size_t sparseRegistered =
      preferCpuSparseKernels(c10::DispatchKey::SparseCPU, c10::DispatchKey::SparsePrivateUse1,
                             *sparse) +
      preferCpuSparseKernels(c10::DispatchKey::SparseCsrCPU, c10::DispatchKey::SparseCsrPrivateUse1,
                             *compressed);
  static auto* library = new torch::Library(torch::Library::IMPL, "aten",
                                            c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  std::vector<std::string> names;
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findOp(name);
    if (!op || !op->hasSchema() || !op->hasKernelForDispatchKey(c10::DispatchKey::CPU)) continue;
    // Math decompositions always; the generic functional/in-place forms of
    // structured operators (allocate with the C++ meta function, then call
    // the out= form) for unary and binary operators, where the fallback
    // validates devices exactly as they do and saves a dispatch round.
    const bool math = op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd);
    const bool structured =
        op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) &&
        unaryOrBinary(op->schema());
    if (math || structured) {
      const std::string bare = name.name.substr(6);  // without "aten::"
      names.push_back(name.overload_name.empty() ? bare : bare + "." + name.overload_name);
    }
  }
  // Found by the tests: the generic kernel differs from the CPU one (layer
  // and group norm: a math decomposition; mode: rejects non-CPU/CUDA devices;
  // mse_loss: its generic form calls the CPU out= kernel with an output that
  // kernel resizes, with a deprecation warning on every first call).
  names.insert(names.end(), {"native_layer_norm", "native_group_norm", "mode.values", "mse_loss"});
  size_t registered = 0;
  for (const std::string& name : names) {
    const auto dot = name.find('.');
    const c10::OperatorName qualified{"aten::" + name.substr(0, dot),
                                      dot == std::string::npos ? "" : name.substr(dot + 1)};
    std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findOp(qualified);
    if (!op || op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) continue;
    library->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&openregFallback>());
    ++registered;
  }
  return registered + sparseRegistered;
}

// Nested tensors on openreg (e.g. the Transformer fast path) run the CPU's
// nested kernels the same way.
TORCH_LIBRARY_IMPL(_, NestedTensorPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&openregFallback>());
}

// Sparse tensors on openreg (COO; CSR, CSC, BSR, BSC) run the CPU's sparse
// kernels on aliases of their members (sparse_context.cpp), synchronously.
TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&openregFallback>());
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&openregFallback>());
}

}  // namespace torch_openreg
