// operator_plan.h — planning a call of any ATen operator on meta shadows.
//
// The boxed fallback's side of the planner (plan.h): runs the operator's meta
// kernel on data-free shadows of the arguments, on the caller's thread, which
// validates the call and tells the outputs' layouts with the same stride
// rules the CPU kernel follows. An operator that cannot be planned — results
// that are not tensors (.item()-like), data-dependent shapes, results that
// view an input, nested tensors, no meta kernel — gets a synchronous plan.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>

#include "engine/plan.h"

namespace torch_openreg {

// Fills `plan` for calling `op` with `arguments` (see MetaPlanner).
void planOperatorOnMeta(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> arguments,
                        Plan& plan);

// The plan for calling `op` with `arguments` (cached; see plan.h).
PlanTicket planOperatorCall(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> arguments);

// What the sync debug mode calls this call if it synchronizes on CUDA too:
// its result needs the device's data on the host — a value (.item(), equal)
// or a size (nonzero, masked_select, unique, indexing with a mask). Empty
// otherwise, and whenever the mode is off: other synchronous runs (views,
// operators without a meta kernel, first calls) are this backend's choice,
// not a synchronization the program asked for.
std::string dataDependentSynchronization(const c10::OperatorHandle& op,
                                         c10::ArrayRef<c10::IValue> arguments);

}  // namespace torch_openreg
