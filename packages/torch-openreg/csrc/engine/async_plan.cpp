// async_plan.cpp — planning on meta shadows, and the plan cache.
#include "engine/async_plan.h"

#include <c10/util/hash.h>

#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "engine/fallback_arguments.h"
#include "engine/meta_shadow.h"

namespace torch_openreg {

TensorLayout TensorLayout::of(const at::Tensor& tensor) {
  TensorLayout layout;
  if (!tensor.defined()) return layout;
  layout.sizes.assign(tensor.sizes().begin(), tensor.sizes().end());
  layout.strides.assign(tensor.strides().begin(), tensor.strides().end());
  layout.storageOffset = tensor.storage_offset();
  layout.dtype = tensor.scalar_type();
  layout.defined = true;
  return layout;
}

bool TensorLayout::matches(const at::Tensor& tensor) const {
  return tensor.sizes() == c10::IntArrayRef(sizes) && tensor.strides() == c10::IntArrayRef(strides) &&
         tensor.storage_offset() == storageOffset;
}

namespace {

// ---- Planning ----------------------------------------------------------------

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

AsyncPlan synchronousPlan() {
  AsyncPlan plan;
  plan.synchronous = true;
  return plan;
}

AsyncPlan planOnMeta(const c10::OperatorHandle& op, const std::vector<c10::IValue>& arguments) {
  if (hasNestedTensor(arguments)) return synchronousPlan();
  const c10::FunctionSchema& schema = op.schema();
  MetaShadows shadows;
  torch::jit::Stack stack;
  for (size_t i = 0; i < arguments.size(); ++i) {
    stack.push_back(shadowArgument(arguments[i], schema.arguments()[i], shadows));
  }
  const std::vector<c10::IValue> shadowed(stack.begin(), stack.end());
  // Planning is a probe: its warnings are not the user's (the first call runs
  // the real kernel synchronously, whose warnings are reported).
  SilentWarnings silent;
  c10::WarningUtils::WarningHandlerGuard quiet(&silent);
  try {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &stack);
  } catch (const std::exception&) {
    // No meta kernel, a data-dependent shape, or an invalid call: the
    // synchronous path runs the real kernel, which raises the real error.
    return synchronousPlan();
  }
  AsyncPlan plan;
  std::vector<const c10::StorageImpl*> outputStorages;
  for (size_t i = 0; i < stack.size(); ++i) {
    AsyncPlan::Result result;
    if (std::optional<size_t> mutated = mutatedArgumentOf(schema, i)) {
      result.mutatedArgument = static_cast<int>(*mutated);
    } else {
      if (!stack[i].isTensor()) return synchronousPlan();  // a value the caller needs now
      const at::Tensor& output = stack[i].toTensor();
      if (output.defined()) {
        const c10::StorageImpl* storage = output.storage().unsafeGetStorageImpl();
        const bool shared = std::find(outputStorages.begin(), outputStorages.end(), storage) !=
                            outputStorages.end();
        if (shadows.aliasesShadow(output) || shared) return synchronousPlan();  // a view
        outputStorages.push_back(storage);
      }
      result.layout = TensorLayout::of(output);
    }
    plan.results.push_back(std::move(result));
  }
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (!isMutable(schema.arguments()[i]) || !arguments[i].isTensor()) continue;
    const at::Tensor& original = arguments[i].toTensor();
    const at::Tensor& meta = shadowed[i].toTensor();
    if (original.defined() && !TensorLayout::of(meta).matches(original)) {
      plan.argumentLayouts.emplace_back(i, TensorLayout::of(meta));
    }
  }
  plan.placement = std::make_shared<PlacementHints>(plan.results.size());
  return plan;
}

// ---- Cache key -----------------------------------------------------------------

// Everything a plan can depend on: the operator, and for every argument its
// type and value, except tensor data (tensors contribute their metadata and
// which other argument they share storage with).
class KeyBuilder {
 public:
  explicit KeyBuilder(const c10::OperatorHandle& op) {
    key_.reserve(64);
    push(reinterpret_cast<intptr_t>(&op.schema()));
  }

  bool add(const c10::IValue& value) {
    if (value.isTensor()) return addTensor(value.toTensor());
    if (value.isNone()) return push(1);
    if (value.isInt()) return push(2, value.toInt());
    if (value.isBool()) return push(3, value.toBool());
    if (value.isDouble()) return push(4, bitsOf(value.toDouble()));
    if (value.isComplexDouble()) {
      const c10::complex<double> number = value.toComplexDouble();
      return push(5, bitsOf(number.real())) && push(bitsOf(number.imag()));
    }
    if (value.isDevice()) return push(6, static_cast<int64_t>(value.toDevice().type())) &&
                                 push(value.toDevice().index());
    if (value.isString()) return push(7, static_cast<int64_t>(std::hash<std::string>()(value.toStringRef())));
    if (value.isGenerator()) return push(8);
    if (value.isList()) {
      push(9, static_cast<int64_t>(value.toListRef().size()));
      for (const c10::IValue& element : value.toListRef()) {
        if (!add(element)) return false;
      }
      return true;
    }
    return false;  // not understood: do not cache
  }

  const std::vector<int64_t>& key() const { return key_; }

 private:
  static int64_t bitsOf(double value) {
    int64_t bits = 0;
    std::memcpy(&bits, &value, sizeof(bits));
    return bits;
  }

  template <typename... Values>
  bool push(Values... values) {
    (key_.push_back(static_cast<int64_t>(values)), ...);
    return true;
  }

  bool addTensor(const at::Tensor& tensor) {
    if (!tensor.defined()) return push(10);
    if (tensor.is_nested() || tensor.layout() != c10::kStrided) return false;
    push(11, static_cast<int64_t>(tensor.device().type()), tensor.device().index(),
         static_cast<int64_t>(tensor.scalar_type()), tensor.dim(), tensor.storage_offset(),
         tensor.is_conj(), tensor.is_neg(), tensor.unsafeGetTensorImpl()->is_wrapped_number());
    for (int64_t size : tensor.sizes()) push(size);
    for (int64_t stride : tensor.strides()) push(stride);
    return push(aliasClass(tensor));
  }

  // Index of the first tensor seen with the same storage.
  int64_t aliasClass(const at::Tensor& tensor) {
    const c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
    for (size_t i = 0; i < storages_.size(); ++i) {
      if (storages_[i] == storage) return static_cast<int64_t>(i);
    }
    storages_.push_back(storage);
    return static_cast<int64_t>(storages_.size() - 1);
  }

  std::vector<int64_t> key_;
  std::vector<const c10::StorageImpl*> storages_;
};

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& key) const {
    size_t hash = 0;
    for (int64_t part : key) hash = c10::hash_combine(hash, static_cast<size_t>(part));
    return hash;
  }
};

class PlanCache {
 public:
  std::shared_ptr<const AsyncPlan> find(const std::vector<int64_t>& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = plans_.find(key);
    return found == plans_.end() ? nullptr : found->second;
  }

  void store(std::vector<int64_t> key, std::shared_ptr<const AsyncPlan> plan) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (plans_.size() >= kCapacity) plans_.clear();  // shapes changed wholesale: start over
    plans_.emplace(std::move(key), std::move(plan));
  }

 private:
  static constexpr size_t kCapacity = 16384;
  std::mutex mutex_;
  std::unordered_map<std::vector<int64_t>, std::shared_ptr<const AsyncPlan>, KeyHash> plans_;
};

PlanCache& planCache() {
  static auto* cache = new PlanCache();
  return *cache;
}

}  // namespace

PlanTicket planFor(const c10::OperatorHandle& op, const std::vector<c10::IValue>& arguments) {
  PlanTicket ticket;
  KeyBuilder builder(op);
  ticket.cacheable = true;
  for (const c10::IValue& argument : arguments) ticket.cacheable = ticket.cacheable && builder.add(argument);
  if (ticket.cacheable) {
    if (auto cached = planCache().find(builder.key())) {
      ticket.plan = std::move(cached);
      return ticket;
    }
  }
  auto candidate = std::make_shared<AsyncPlan>(planOnMeta(op, arguments));
  if (candidate->synchronous) {
    ticket.plan = candidate;
    if (ticket.cacheable) planCache().store(builder.key(), candidate);
    return ticket;
  }
  ticket.candidate = std::move(candidate);
  ticket.key = builder.key();
  return ticket;
}

void confirmPlan(const PlanTicket& ticket, const std::vector<c10::IValue>& results,
                 const std::vector<c10::IValue>& arguments, const std::vector<TensorLayout>& before) {
  if (!ticket.cacheable || !ticket.candidate) return;
  AsyncPlan& plan = *ticket.candidate;
  bool faithful = results.size() == plan.results.size();
  for (size_t i = 0; faithful && i < results.size(); ++i) {
    AsyncPlan::Result& expected = plan.results[i];
    if (expected.mutatedArgument >= 0) continue;
    const at::Tensor actual = results[i].isTensor() ? results[i].toTensor() : at::Tensor();
    faithful = actual.defined() == expected.layout.defined &&
               (!actual.defined() || (actual.sizes() == c10::IntArrayRef(expected.layout.sizes) &&
                                      actual.scalar_type() == expected.layout.dtype));
    if (faithful && actual.defined()) expected.layout = TensorLayout::of(actual);  // the CPU's strides
  }
  // What the CPU kernel did to its mutable arguments is what later calls do.
  plan.argumentLayouts.clear();
  for (size_t i = 0; i < arguments.size() && i < before.size(); ++i) {
    if (!before[i].defined || !arguments[i].isTensor()) continue;
    const at::Tensor& tensor = arguments[i].toTensor();
    if (!before[i].matches(tensor)) plan.argumentLayouts.emplace_back(i, TensorLayout::of(tensor));
  }
  if (!faithful) {
    plan = synchronousPlan();
  }
  planCache().store(ticket.key, ticket.candidate);
}

}  // namespace torch_openreg
