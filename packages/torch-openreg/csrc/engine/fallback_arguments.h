// fallback_arguments.h — argument handling shared by the fallback's paths.
//
// Device resolution (with CUDA's mixed-device errors), conversion of
// arguments to what a CPU kernel takes (aliases, CPU devices, generator
// engines), and the schema facts the fallback needs (which arguments are
// mutated, which results alias them).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <vector>

#include "engine/kernel_context.h"

namespace torch_openreg {

// Where tensors hide in operator arguments: a tensor, a Tensor[] or a
// Tensor?[]. These two are the one place that knows it.
//
// Calls `visit` on every tensor of an argument, in mapTensors' order. A
// visit that only looks costs no copy of the argument (a foreach operator's
// lists hold every parameter of a model).
template <typename Visit>
void forEachTensor(const c10::IValue& value, Visit&& visit) {
  if (value.isTensor()) return visit(value.toTensor());
  if (!value.isList()) return;
  for (const c10::IValue& element : value.toListRef()) {
    if (element.isTensor()) visit(element.toTensor());
  }
}

// Applies `convert` to every tensor of an argument, keeping its structure;
// other values come back unchanged.
template <typename Convert>
c10::IValue mapTensors(const c10::IValue& value, Convert&& convert) {
  if (value.isTensor()) return convert(value.toTensor());
  if (value.isTensorList()) {
    c10::List<at::Tensor> converted;
    converted.reserve(value.toListRef().size());
    for (const at::Tensor& tensor : value.toTensorList()) converted.push_back(convert(tensor));
    return converted;
  }
  if (value.isList()) {
    bool hasTensors = false;
    for (const c10::IValue& element : value.toListRef()) hasTensors |= element.isTensor();
    if (!hasTensors) return value;
    c10::List<std::optional<at::Tensor>> converted;
    converted.reserve(value.toListRef().size());
    for (const c10::IValue& element : value.toListRef()) {
      converted.push_back(element.isTensor() ? std::optional(convert(element.toTensor()))
                                             : std::nullopt);
    }
    return converted;
  }
  return value;
}

// The device an operator runs on; raises on mixed devices.
c10::DeviceIndex findDevice(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> arguments);

// An argument as the CPU kernel takes it: openreg tensors become aliases,
// openreg devices CPU, generators their CPU engines (the device's default
// one when none is given).
c10::IValue toCpuArgument(const c10::IValue& value, const c10::Argument& argument,
                          KernelContext& context);
// The same for a kernel launched asynchronously: tensors are recorded in
// `aliases` (in mapTensors order) and replaced by undefined placeholders,
// which the worker fills with the aliases made there (fillCpuArgument).
c10::IValue recordCpuArgument(const c10::IValue& value, const c10::Argument& argument,
                              DeferredAliases& aliases, c10::DeviceIndex device);
// The argument recorded as `shape`, with its tensors taken from `aliases`
// starting at `next` (advanced past them).
c10::IValue fillCpuArgument(const c10::IValue& shape, c10::ArrayRef<at::Tensor> aliases,
                            size_t& next);
// A CPU result as an openreg value (see KernelContext::adopt).
c10::IValue fromCpuResult(const c10::IValue& value, KernelContext& context);

bool isGeneratorType(const c10::TypePtr& type);
bool isMutable(const c10::Argument& argument);
// The argument a result aliases in place (out=, in-place ops), if any.
std::optional<size_t> mutatedArgumentOf(const c10::FunctionSchema& schema, size_t resultIndex);
void writeBackMutated(const c10::IValue& value, KernelContext& context);

bool hasNestedTensor(c10::ArrayRef<c10::IValue> arguments);
// A COO or compressed sparse tensor among the arguments (or in a tensor list).
bool hasSparseTensor(c10::ArrayRef<c10::IValue> arguments);
// The CPU dispatch keys to run a kernel with (nested and sparse inputs need
// the nested and sparse CPU kernels).
c10::DispatchKeySet cpuKeysFor(c10::ArrayRef<c10::IValue> arguments);

}  // namespace torch_openreg
