// async_functional.cpp — meta planning and launch for functional kernels.
#include "engine/async_functional.h"

#include <c10/util/hash.h>

#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "engine/kernel_allocator.h"
#include "engine/kernel_context.h"
#include "engine/kernel_launch.h"
#include "engine/meta_shadow.h"

namespace torch_openreg {
namespace {

using Layouts = std::vector<at::Tensor>;  // meta tensors: layout without data

// What a signature's calls share: the outputs' layouts, and where the CPU
// kernel's results come from (learned on the worker).
struct FunctionPlan {
  Layouts layouts;
  std::shared_ptr<PlacementHints> placement;
};

std::optional<Layouts> layoutsOnMeta(const std::vector<at::Tensor>& inputs,
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

std::vector<int64_t> cacheKey(const FunctionSignature& signature,
                              const std::vector<at::Tensor>& inputs) {
  std::vector<int64_t> key{static_cast<int64_t>(std::hash<std::string>()(signature.name))};
  key.insert(key.end(), signature.parameters.begin(), signature.parameters.end());
  for (const at::Tensor& input : inputs) {
    key.push_back(input.defined());
    if (!input.defined()) continue;
    key.push_back(static_cast<int64_t>(input.scalar_type()));
    key.push_back(input.dim());
    key.push_back(input.storage_offset());
    key.insert(key.end(), input.sizes().begin(), input.sizes().end());
    key.insert(key.end(), input.strides().begin(), input.strides().end());
  }
  return key;
}

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& key) const {
    size_t hash = 0;
    for (int64_t part : key) hash = c10::hash_combine(hash, static_cast<size_t>(part));
    return hash;
  }
};

// Plans by signature; std::nullopt records "no meta form" (run synchronously).
std::optional<FunctionPlan> cachedPlan(const FunctionSignature& signature,
                                       const std::vector<at::Tensor>& inputs,
                                       const TensorFunction& function) {
  static std::mutex mutex;
  static auto* cache =
      new std::unordered_map<std::vector<int64_t>, std::optional<FunctionPlan>, KeyHash>();
  std::vector<int64_t> key = cacheKey(signature, inputs);
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto found = cache->find(key);
    if (found != cache->end()) return found->second;
  }
  std::optional<FunctionPlan> plan;
  if (std::optional<Layouts> layouts = layoutsOnMeta(inputs, function)) {
    plan = FunctionPlan{*layouts, std::make_shared<PlacementHints>(layouts->size())};
  }
  std::lock_guard<std::mutex> lock(mutex);
  if (cache->size() >= 4096) cache->clear();
  cache->emplace(std::move(key), plan);
  return plan;
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
                                         TensorFunction function, const FunctionSignature& signature) {
  std::optional<FunctionPlan> plan = cachedPlan(signature, inputs, function);
  if (!plan) return runNow(device, inputs, function);
  std::vector<at::Tensor> outputs, inputAliases, outputAliases;
  KernelContext context(device);
  for (const at::Tensor& input : inputs) inputAliases.push_back(context.alias(input));
  for (const at::Tensor& layout : plan->layouts) {
    outputs.push_back(layout.defined() ? allocateLike(layout, device) : at::Tensor());
    outputAliases.push_back(context.alias(outputs.back()));
  }
  launchOnDevice(device, [inputAliases, outputAliases, function = std::move(function),
                          placement = plan->placement] {
    const OutputReservations reserved(outputAliases, placement.get());
    const std::vector<at::Tensor> results = function(inputAliases);
    for (size_t i = 0; i < outputAliases.size(); ++i) reserved.place(i, results[i]);
  });
  return outputs;
}

}  // namespace torch_openreg
