// fallback.cpp — the boxed fallback for PrivateUse1 (see fallback.h).
//
// Every ATen operator without a native kernel comes here (runInPlace) and
// runs its own CPU kernel on device memory, one of two ways:
//  * asynchronously (the common case, operator_launch.h): the operator first
//    runs on meta shadows of its arguments on the caller's thread
//    (operator_plan.h), which validates the call and gives the outputs'
//    layout; the outputs are allocated on the device, and the CPU kernel is
//    launched on the current stream to fill them. The caller continues at once.
//  * synchronously (synchronous_run.h): for what cannot be known before the
//    kernel runs, and the first call of every signature.
// Also here: the fallback mode (OPENREG_FALLBACK) and the registrations that
// make PyTorch pick the CPU's kernels for openreg.
#include "engine/fallback.h"

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

#include "base/environment.h"
#include "base/sync_debug.h"
#include "engine/fallback_arguments.h"
#include "engine/launch_context.h"
#include "engine/launch_spec.h"
#include "engine/operator_launch.h"
#include "engine/operator_plan.h"
#include "engine/plan.h"
#include "engine/synchronous_run.h"

namespace torch_openreg {
namespace {

using Arguments = std::vector<c10::IValue>;

// ---- Dispatch ----------------------------------------------------------------

// One operator call, in the engine's order: where it runs (launch_context),
// its plan (operator_plan, plan), then either the synchronous run
// (synchronous_run) or the asynchronous launch (operator_launch); both go
// through the launch path (kernel_launch) with the call's LaunchSpec.
void runInPlace(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t argumentCount = op.schema().arguments().size();
  const Arguments arguments(stack->end() - argumentCount, stack->end());
  LaunchSpec spec{LaunchContext::forDevice(findDevice(op, arguments)), op};
  spec.arguments = arguments;
  const PlanTicket ticket = planOperatorCall(op, arguments);
  const std::string synchronization = dataDependentSynchronization(op, arguments);
  if (!synchronization.empty()) spec.synchronizes = synchronization.c_str();
  std::vector<c10::IValue> results = ticket.runsNow()
                                         ? runOperatorNow(op, arguments, spec, ticket)
                                         : launchOperator(op, arguments, spec, ticket.plan);
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
    const std::string synchronization = dataDependentSynchronization(op, arguments);
    if (!synchronization.empty()) checkSynchronization(synchronization.c_str());
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
    if (!op || !op->hasSchema()) continue;
    // Foreach operators (what optimizers call) have no CPU kernel, only a
    // generic one that calls the per-tensor operator for each element: one
    // launch per tensor. Registered here, a call is one launch for the whole
    // list, and the CPU's loop runs on the worker. Left to the generic
    // kernel: _foreach_copy_, whose sources may be on another device (copy_
    // moves them; the fallback refuses mixed devices).
    const bool foreach = name.name.rfind("aten::_foreach_", 0) == 0 &&
                         name.name.rfind("aten::_foreach_copy", 0) != 0;
    if (!op->hasKernelForDispatchKey(c10::DispatchKey::CPU) && !foreach) continue;
    // Math decompositions always; the generic functional/in-place forms of
    // structured operators (allocate with the C++ meta function, then call
    // the out= form) for unary and binary operators, where the fallback
    // validates devices exactly as they do and saves a dispatch round.
    const bool math = op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd);
    const bool structured =
        op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) &&
        unaryOrBinary(op->schema());
    if (math || structured || foreach) {
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
