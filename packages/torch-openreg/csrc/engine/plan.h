// plan.h — what an operator call produces, known before its kernel runs.
//
// To run an operator asynchronously, its outputs must exist when the call
// returns. A plan records, per result, either "the mutated argument i" or the
// layout (sizes, strides, dtype) of a new output, plus any layout change of
// out= arguments, and the per-signature facts learned while running it (the
// out= overload to call and whether it fits, where the CPU kernel's results
// come from). Plans come from running the call on meta shadows (meta_shadow.h)
// and are cached by the call's signature: the operator (or a native kernel's
// name and parameters) and, for every argument, its type and value except
// tensor data — tensors contribute their metadata and which other argument
// shares their storage. Meta kernels are Python functions for many operators
// (tens of microseconds), while a training loop repeats the same signatures,
// so the cache answers nearly every call after the first.
//
// One planner serves both asynchronous paths, the boxed fallback (any ATen
// operator) and the functional native kernels (functional_kernel.h), with one
// policy: meta kernels are not always faithful to the CPU kernels (an
// auxiliary output's size, an output's strides or memory format, an out=
// argument they resize when the CPU kernel does not), so a new plan is only a
// candidate. The first call of a signature runs synchronously, and its real
// results correct the plan (the CPU's strides and resizing) or turn it
// synchronous when result sizes or dtypes differ, which may mean they depend
// on the data. Plans live in one bounded least-recently-used cache, so a
// workload whose shapes keep changing replans only what it no longer uses.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/SmallVector.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "engine/kernel_allocator.h"
#include "engine/tensor_layout.h"

namespace torch_openreg {

// The signature of a call: everything its plan may depend on.
class PlanKey {
 public:
  // An ATen operator called with `arguments` (boxed fallback).
  static PlanKey forOperator(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> arguments);
  // A native kernel `name` with its non-tensor `parameters` and tensor inputs.
  static PlanKey forFunction(const char* name, c10::ArrayRef<int64_t> parameters,
                             c10::ArrayRef<at::Tensor> inputs);

  // False when an argument has a type the key cannot describe: such calls
  // are planned and confirmed anew every time (that is, run synchronously).
  bool cacheable() const { return cacheable_; }
  size_t hash() const { return hash_; }
  bool operator==(const PlanKey& other) const {
    return hash_ == other.hash_ && parts_ == other.parts_;
  }

 private:
  class Builder;
  // Typical keys fit inline (no heap allocation on the hot path).
  c10::SmallVector<int64_t, 48> parts_;
  size_t hash_ = 0;
  bool cacheable_ = true;
};

struct Plan {
  bool synchronous = false;
  struct Result {
    int mutatedArgument = -1;  // >= 0: the result is that argument
    TensorLayout layout;       // otherwise: a new output with this layout,
    // or, for a list of new tensors (Tensor[], e.g. _foreach_sqrt's), one
    // layout per element.
    bool list = false;
    std::vector<TensorLayout> elements;
  };
  std::vector<Result> results;
  // Arguments whose layout the operator changes (out= resizing).
  std::vector<std::pair<size_t, TensorLayout>> argumentLayouts;
  // The out= overload the kernel writes its outputs with, if any; set to
  // false once a call shows that it does not match the functional form for
  // this signature (it resizes its output, or expects another shape).
  std::optional<c10::OperatorHandle> outVariant;
  mutable std::atomic<bool> outVariantFits{true};
  // Where the CPU kernel's results come from, learned by running it (see
  // OutputReservations in kernel_allocator.h); one entry per new output.
  mutable PlacementHints placement;

  // Turns the plan into "run every call synchronously".
  void makeSynchronous();
  // New outputs, each element of a list counted.
  size_t newOutputCount() const;
};

// The plan of one call: `plan` to follow (it may say "synchronous"), or, for
// the first call of a signature, a `candidate` to confirm after running the
// call synchronously.
struct PlanTicket {
  std::shared_ptr<const Plan> plan;
  std::shared_ptr<Plan> candidate;
  PlanKey key;

  bool firstCall() const { return plan == nullptr; }
  // Whether the call runs synchronously (synchronous_run.h): a first call, or
  // a plan that cannot tell the outputs ahead.
  bool runsNow() const { return firstCall() || plan->synchronous; }
};

// Fills a new plan by running the call on meta shadows; makes it synchronous
// when that cannot tell the outputs.
using MetaPlanner = std::function<void(Plan& plan)>;

// Finds the plan for `key`, or asks `planOnMeta` for a candidate.
PlanTicket lookUpPlan(PlanKey key, const MetaPlanner& planOnMeta);

// Records what the synchronous first call really produced: `results` in the
// plan's order (mutated-argument results included), and the out= arguments
// whose layout the call changed.
void confirmPlan(const PlanTicket& ticket, c10::ArrayRef<c10::IValue> results,
                 std::vector<std::pair<size_t, TensorLayout>> changedArguments);

// For tests and diagnostics.
struct PlanCacheInfo {
  size_t size;
  size_t capacity;
  uint64_t hits;
  uint64_t misses;
  uint64_t evictions;
};
PlanCacheInfo planCacheInfo();
// Changes the capacity (evicting the least recently used plans beyond it).
void setPlanCacheCapacity(size_t capacity);

}  // namespace torch_openreg
