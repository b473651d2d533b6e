// operator_launch.h — the boxed fallback's asynchronous path.
//
// An ATen operator call whose plan knows its outputs: they are allocated on
// the device now (so the caller gets them at once), the call is recorded for
// the worker (the CPU aliases it will run on, as descriptors; host tensor
// arguments copied, since the caller may change them before the kernel runs),
// and the operator's CPU kernel — its out= overload when there is one — is
// launched on the stream to fill them.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <memory>
#include <vector>

#include "engine/launch_spec.h"
#include "engine/plan.h"

namespace torch_openreg {

// The results of the call (new outputs and mutated arguments, in the
// schema's order), returned before the kernel has run.
std::vector<c10::IValue> launchOperator(const c10::OperatorHandle& op,
                                        const std::vector<c10::IValue>& arguments,
                                        const LaunchSpec& spec, std::shared_ptr<const Plan> plan);

}  // namespace torch_openreg
