// out_variant.h — finding the out= overload of a functional operator.
//
// When an operator's outputs are allocated up front (asynchronous execution),
// its out= overload lets the CPU kernel write straight into them. Every
// overload of the operator's name is a candidate; one is accepted only if its
// schema is the functional one plus one out= tensor per result, and it has a
// CPU kernel.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>

namespace torch_openreg {

std::optional<c10::OperatorHandle> outVariantOf(const c10::OperatorHandle& op);

}  // namespace torch_openreg
