// plan.cpp — plan keys, the first-call policy and the bounded plan cache.
#include "engine/plan.h"

#include <c10/util/hash.h>

#include <cstring>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace torch_openreg {

void Plan::makeSynchronous() {
  synchronous = true;
  results.clear();
  argumentLayouts.clear();
  outVariant.reset();
}

size_t Plan::newOutputCount() const {
  size_t count = 0;
  for (const Result& result : results) {
    if (result.mutatedArgument < 0) count += result.list ? result.elements.size() : 1;
  }
  return count;
}

// ---- Keys ----------------------------------------------------------------------

class PlanKey::Builder {
 public:
  explicit Builder(PlanKey& key) : key_(key) {}

  // Leaves the values of floating-point numbers out of the key (their kind
  // stays in it): for operators whose outputs cannot depend on them.
  void treatFloatValuesAsData() { floatValuesAreData_ = true; }

  void add(const c10::IValue& value) {
    if (!key_.cacheable_) return;
    if (value.isTensor()) return addTensor(value.toTensor());
    if (value.isNone()) return push(1);
    if (value.isInt()) return push(2, value.toInt());
    if (value.isBool()) return push(3, value.toBool());
    if (value.isDouble()) {
      return floatValuesAreData_ ? push(4) : push(4, bitsOf(value.toDouble()));
    }
    if (value.isComplexDouble()) {
      if (floatValuesAreData_) return push(5);
      const c10::complex<double> number = value.toComplexDouble();
      return push(5, bitsOf(number.real()), bitsOf(number.imag()));
    }
    if (value.isDevice()) {
      return push(6, static_cast<int64_t>(value.toDevice().type()), value.toDevice().index());
    }
    if (value.isString()) {
      return push(7, static_cast<int64_t>(std::hash<std::string>()(value.toStringRef())));
    }
    if (value.isGenerator()) return push(8);
    if (value.isList()) {
      push(9, static_cast<int64_t>(value.toListRef().size()));
      for (const c10::IValue& element : value.toListRef()) add(element);
      return;
    }
    key_.cacheable_ = false;  // not understood
  }

  void addTensor(const at::Tensor& tensor) {
    if (!tensor.defined()) return push(10);
    if (tensor.is_nested() || tensor.layout() != c10::kStrided) {
      key_.cacheable_ = false;
      return;
    }
    push(11, static_cast<int64_t>(tensor.device().type()), tensor.device().index(),
         static_cast<int64_t>(tensor.scalar_type()), tensor.dim(), tensor.storage_offset(),
         tensor.is_conj(), tensor.is_neg(), tensor.unsafeGetTensorImpl()->is_wrapped_number());
    for (int64_t size : tensor.sizes()) push(size);
    for (int64_t stride : tensor.strides()) push(stride);
    push(aliasClass(tensor));
  }

  template <typename... Values>
  void push(Values... values) {
    (key_.parts_.push_back(static_cast<int64_t>(values)), ...);
  }

  void finish() {
    size_t hash = 0;
    for (int64_t part : key_.parts_) hash = c10::hash_combine(hash, static_cast<size_t>(part));
    key_.hash_ = hash;
  }

 private:
  static int64_t bitsOf(double value) {
    int64_t bits = 0;
    std::memcpy(&bits, &value, sizeof(bits));
    return bits;
  }

  // Index of the first tensor seen with the same storage: plans differ when
  // arguments alias each other (an in-place op on a view of its input).
  int64_t aliasClass(const at::Tensor& tensor) {
    const c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
    for (size_t i = 0; i < storages_.size(); ++i) {
      if (storages_[i] == storage) return static_cast<int64_t>(i);
    }
    storages_.push_back(storage);
    return static_cast<int64_t>(storages_.size() - 1);
  }

  PlanKey& key_;
  bool floatValuesAreData_ = false;
  c10::SmallVector<const c10::StorageImpl*, 8> storages_;
};

namespace {

constexpr std::string_view kForeachPrefix = "aten::_foreach_";

// A foreach operator applies its per-tensor operator to every element of its
// lists: it is pointwise when that operator is (_foreach_mul_ and mul, not
// _foreach_norm and norm). Decided once per operator.
bool foreachOfPointwise(const c10::OperatorHandle& op) {
  static std::mutex mutex;
  static std::unordered_map<const c10::FunctionSchema*, bool> known;
  const std::lock_guard<std::mutex> lock(mutex);
  auto [entry, inserted] = known.try_emplace(&op.schema(), false);
  if (!inserted) return entry->second;
  std::string base(std::string_view(op.schema().name()).substr(kForeachPrefix.size()));
  if (!base.empty() && base.back() == '_') base.pop_back();  // in-place form
  for (const char* overload : {"", "Tensor", "Scalar"}) {
    std::optional<c10::OperatorHandle> single =
        c10::Dispatcher::singleton().findOp({"aten::" + base, overload});
    if (single && single->hasSchema()) {
      entry->second = single->hasTag(at::Tag::pointwise);
      break;
    }
  }
  return entry->second;
}

// A pointwise operator (ATen's tag) gives its outputs the broadcast shape of
// its tensors, and type promotion looks only at a number's kind: a float
// scalar is data to it, like a tensor's elements. Keyed by value, every new
// value would be a new signature, planned on meta and run synchronously —
// an optimizer whose step size changes every step (Adam's bias correction)
// would pay that for each parameter shape at every step. Integers stay in
// the key: some meta functions check them (pow refuses negative integer
// exponents of integer tensors), and they rarely change from call to call.
bool floatScalarsAreData(const c10::OperatorHandle& op) {
  if (op.hasTag(at::Tag::pointwise)) return true;
  return op.schema().name().compare(0, kForeachPrefix.size(), kForeachPrefix) == 0 &&
         foreachOfPointwise(op);
}

}  // namespace

PlanKey PlanKey::forOperator(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> arguments) {
  PlanKey key;
  Builder builder(key);
  builder.push(0, reinterpret_cast<intptr_t>(&op.schema()));
  if (floatScalarsAreData(op)) builder.treatFloatValuesAsData();
  for (const c10::IValue& argument : arguments) builder.add(argument);
  builder.finish();
  return key;
}

PlanKey PlanKey::forFunction(const char* name, c10::ArrayRef<int64_t> parameters,
                             c10::ArrayRef<at::Tensor> inputs) {
  PlanKey key;
  Builder builder(key);
  // Names are string literals of the kernels: their address identifies them.
  builder.push(1, reinterpret_cast<intptr_t>(name), static_cast<int64_t>(parameters.size()));
  for (int64_t parameter : parameters) builder.push(parameter);
  for (const at::Tensor& input : inputs) builder.addTensor(input);
  builder.finish();
  return key;
}

// ---- Cache ---------------------------------------------------------------------

namespace {

struct KeyHash {
  size_t operator()(const PlanKey& key) const { return key.hash(); }
};

class PlanCache {
 public:
  std::shared_ptr<const Plan> find(const PlanKey& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = index_.find(key);
    if (found == index_.end()) {
      ++misses_;
      return nullptr;
    }
    ++hits_;
    order_.splice(order_.begin(), order_, found->second);  // most recently used first
    return found->second->second;
  }

  void store(const PlanKey& key, std::shared_ptr<const Plan> plan) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = index_.find(key);
    if (found != index_.end()) {
      found->second->second = std::move(plan);
      order_.splice(order_.begin(), order_, found->second);
      return;
    }
    order_.emplace_front(key, std::move(plan));
    index_.emplace(key, order_.begin());
    evictBeyond(capacity_);
  }

  PlanCacheInfo info() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {index_.size(), capacity_, hits_, misses_, evictions_};
  }

  void setCapacity(size_t capacity) {
    std::lock_guard<std::mutex> lock(mutex_);
    capacity_ = capacity;
    evictBeyond(capacity_);
  }

 private:
  void evictBeyond(size_t capacity) {
    while (index_.size() > capacity) {
      index_.erase(order_.back().first);
      order_.pop_back();
      ++evictions_;
    }
  }

  using Entry = std::pair<PlanKey, std::shared_ptr<const Plan>>;
  std::mutex mutex_;
  // A plan takes a few hundred bytes: 16384 of them stay well under 10 MB.
  size_t capacity_ = 16384;
  std::list<Entry> order_;
  std::unordered_map<PlanKey, std::list<Entry>::iterator, KeyHash> index_;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
  uint64_t evictions_ = 0;
};

PlanCache& planCache() {
  static auto* cache = new PlanCache();
  return *cache;
}

// The CPU kernel's result agrees with the meta kernel's in what later calls
// rely on before their kernel runs: defined-ness, sizes and dtype.
bool tensorAgrees(const TensorLayout& expected, const at::Tensor& actual) {
  if (actual.defined() != expected.defined) return false;
  return !actual.defined() || (actual.sizes() == c10::IntArrayRef(expected.sizes) &&
                               actual.scalar_type() == expected.dtype);
}

// The same for a result, and, when it does agree, later calls allocate with
// the CPU kernel's strides (memory format).
bool confirmResult(Plan::Result& expected, const c10::IValue& actual) {
  if (expected.list) {
    if (!actual.isTensorList() || actual.toListRef().size() != expected.elements.size()) {
      return false;
    }
    const c10::List<at::Tensor> elements = actual.toTensorList();
    for (size_t i = 0; i < elements.size(); ++i) {
      const at::Tensor element = elements.get(i);
      if (!element.defined() || !tensorAgrees(expected.elements[i], element)) return false;
      expected.elements[i] = TensorLayout::of(element);
    }
    return true;
  }
  const at::Tensor tensor = actual.isTensor() ? actual.toTensor() : at::Tensor();
  if (!tensorAgrees(expected.layout, tensor)) return false;
  if (expected.layout.defined) expected.layout = TensorLayout::of(tensor);
  return true;
}

}  // namespace

PlanTicket lookUpPlan(PlanKey key, const MetaPlanner& planOnMeta) {
  PlanTicket ticket{nullptr, nullptr, std::move(key)};
  if (ticket.key.cacheable()) {
    ticket.plan = planCache().find(ticket.key);
    if (ticket.plan) return ticket;
  }
  auto candidate = std::make_shared<Plan>();
  planOnMeta(*candidate);
  if (candidate->synchronous) {
    ticket.plan = candidate;
    if (ticket.key.cacheable()) planCache().store(ticket.key, candidate);
    return ticket;
  }
  candidate->placement = PlacementHints(candidate->newOutputCount());
  ticket.candidate = std::move(candidate);
  return ticket;
}

void confirmPlan(const PlanTicket& ticket, c10::ArrayRef<c10::IValue> results,
                 std::vector<std::pair<size_t, TensorLayout>> changedArguments) {
  if (!ticket.key.cacheable() || !ticket.candidate) return;
  Plan& plan = *ticket.candidate;
  bool faithful = results.size() == plan.results.size();
  for (size_t i = 0; faithful && i < results.size(); ++i) {
    Plan::Result& expected = plan.results[i];
    if (expected.mutatedArgument < 0) faithful = confirmResult(expected, results[i]);
  }
  // What the CPU kernel did to its mutable arguments is what later calls do.
  plan.argumentLayouts = std::move(changedArguments);
  if (!faithful) plan.makeSynchronous();
  planCache().store(ticket.key, ticket.candidate);
}

PlanCacheInfo planCacheInfo() { return planCache().info(); }

void setPlanCacheCapacity(size_t capacity) { planCache().setCapacity(capacity); }

}  // namespace torch_openreg
