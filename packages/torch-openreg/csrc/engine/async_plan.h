// async_plan.h — what an operator returns, known before its kernel runs.
//
// To run an operator asynchronously, its outputs must exist when the call
// returns. A plan records, per result, either "the mutated argument i" or the
// layout (sizes, strides, dtype) of a new output, plus any layout change of
// out= arguments. Plans come from running the operator on meta shadows, and
// are cached by the operator and its arguments' metadata: PyTorch's meta
// kernels for common operators are Python functions (tens of microseconds),
// while a training loop repeats the same calls, so the cache answers nearly
// every call after the first. An operator that cannot be planned (non-tensor
// results, data-dependent shapes, views of inputs, no meta kernel) gets a plan
// that says "synchronous".
//
// Meta kernels are not always faithful to the CPU kernels (an auxiliary
// output's size, an output's strides, an out= argument they resize when the
// CPU kernel does not). So a new plan is only a candidate: the first call
// with a signature runs synchronously, and its real results correct the plan
// (the CPU's strides, the CPU's resizing of out= arguments) — or turn it
// synchronous when result sizes or dtypes differ, which may mean they depend
// on the data.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/SmallVector.h>

#include <memory>
#include <vector>

#include "engine/kernel_allocator.h"

namespace torch_openreg {

// Sizes and strides of at most 6 dimensions live inline: layouts are built
// for every operator call, and heap allocations there cost measurable time.
using Dimensions = c10::SmallVector<int64_t, 6>;

struct TensorLayout {
  Dimensions sizes;
  Dimensions strides;
  int64_t storageOffset = 0;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  bool defined = false;

  // The layout `tensor` has now (undefined for an undefined tensor).
  static TensorLayout of(const at::Tensor& tensor);
  // Same sizes, strides and storage offset.
  bool matches(const at::Tensor& tensor) const;
};

struct AsyncPlan {
  bool synchronous = false;
  struct Result {
    int mutatedArgument = -1;  // >= 0: the result is that argument
    TensorLayout layout;       // otherwise: a new output with this layout
  };
  std::vector<Result> results;
  // Arguments whose layout the operator changes (out= resizing).
  std::vector<std::pair<size_t, TensorLayout>> argumentLayouts;
  // Where the CPU kernel's results come from, learned by running it (see
  // OutputReservations in kernel_allocator.h); one per new output.
  std::shared_ptr<PlacementHints> placement;
};

struct PlanTicket {
  std::shared_ptr<const AsyncPlan> plan;  // null: run synchronously, then confirm
  std::shared_ptr<AsyncPlan> candidate;
  std::vector<int64_t> key;
  bool cacheable = false;
};

// The plan for calling `op` with `arguments`.
PlanTicket planFor(const c10::OperatorHandle& op, const std::vector<c10::IValue>& arguments);
// Records what a synchronous first call really produced (see above):
// `before` holds the layouts the mutable arguments had before the call.
void confirmPlan(const PlanTicket& ticket, const std::vector<c10::IValue>& results,
                 const std::vector<c10::IValue>& arguments, const std::vector<TensorLayout>& before);

}  // namespace torch_openreg
