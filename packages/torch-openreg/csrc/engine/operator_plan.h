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

#include "engine/plan.h"

namespace torch_openreg {

// Fills `plan` for calling `op` with `arguments` (see MetaPlanner).
void planOperatorOnMeta(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> arguments,
                        Plan& plan);

// The plan for calling `op` with `arguments` (cached; see plan.h).
PlanTicket planOperatorCall(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> arguments);

}  // namespace torch_openreg
