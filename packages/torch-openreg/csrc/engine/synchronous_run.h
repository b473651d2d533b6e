// synchronous_run.h — running a call on the stream worker and waiting for it.
//
// What cannot be planned ahead runs this way: results that are not tensors
// (.item()-like), sizes that depend on the data (nonzero, masked_select),
// results that view an input, nested tensors, operators without a meta
// kernel — and the first call of every signature. The kernel runs on the
// worker after all queued work, on CPU aliases made there (KernelContext),
// and its results are adopted as openreg tensors; the caller waits, as CUDA
// does for such operators. A first call's real results then confirm or
// correct its plan (plan.h), and the race detector learns what they wrote.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <vector>

#include "engine/launch_spec.h"
#include "engine/plan.h"
#include "engine/tensor_function.h"

namespace torch_openreg {

// An ATen operator (the boxed fallback's synchronous path).
std::vector<c10::IValue> runOperatorNow(const c10::OperatorHandle& op,
                                        const std::vector<c10::IValue>& arguments,
                                        const LaunchSpec& spec, const PlanTicket& ticket);

// A native kernel "outputs = f(inputs)".
std::vector<at::Tensor> runFunctionNow(const LaunchSpec& spec,
                                       const std::vector<at::Tensor>& inputs,
                                       const TensorFunction& function, const PlanTicket& ticket);

}  // namespace torch_openreg
