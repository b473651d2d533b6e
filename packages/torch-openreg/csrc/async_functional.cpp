// async_functional.cpp — meta planning and launch for functional kernels.
#include "async_functional.h"

#include <exception>
#include <optional>

#include "kernel_context.h"
#include "kernel_launch.h"
#include "meta_shadow.h"

namespace torch_openreg {
namespace {

std::optional<std::vector<at::Tensor>> layoutsOnMeta(const std::vector<at::Tensor>& inputs,
                                                     const TensorFunction& function) {
  MetaShadows shadows;
  std::vector<at::Tensor> metaInputs;
  for (const at::Tensor& input : inputs) metaInputs.push_back(shadows.shadow(input));
  try {
    return function(metaInputs);
  } catch (const std::exception&) {
    return std::nullopt;  // no meta form: run synchronously, which raises real errors
  }
}

std::vector<at::Tensor> runNow(c10::DeviceIndex device, const std::vector<at::Tensor>& inputs,
                               const TensorFunction& function) {
  std::vector<at::Tensor> results;
  runOnDevice(device, [&] {
    KernelContext context(device);
    std::vector<at::Tensor> aliases;
    for (const at::Tensor& input : inputs) aliases.push_back(context.alias(input));
    for (const at::Tensor& result : function(aliases)) results.push_back(context.adopt(result));
  });
  return results;
}

}  // namespace

std::vector<at::Tensor> launchFunctional(c10::DeviceIndex device, std::vector<at::Tensor> inputs,
                                         TensorFunction function) {
  std::optional<std::vector<at::Tensor>> layouts = layoutsOnMeta(inputs, function);
  if (!layouts) return runNow(device, inputs, function);
  std::vector<at::Tensor> outputs, inputAliases, outputAliases;
  KernelContext context(device);
  for (const at::Tensor& input : inputs) inputAliases.push_back(context.alias(input));
  for (const at::Tensor& layout : *layouts) {
    outputs.push_back(layout.defined() ? allocateLike(layout, device) : at::Tensor());
    outputAliases.push_back(context.alias(outputs.back()));
  }
  launchOnDevice(device, [inputAliases, outputAliases, function = std::move(function)] {
    const std::vector<at::Tensor> results = function(inputAliases);
    for (size_t i = 0; i < outputAliases.size(); ++i) {
      if (outputAliases[i].defined()) outputAliases[i].copy_(results[i]);
    }
  });
  return outputs;
}

}  // namespace torch_openreg
