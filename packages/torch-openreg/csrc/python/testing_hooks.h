// testing_hooks.h — torch_openreg._C hooks that only tests use: breaking the
// caching allocator on purpose, and what a copy kernel tells the pinned host
// allocator (at::HostAllocator::record_event).
#pragma once

#include <pybind11/pybind11.h>

namespace torch_openreg {

void bindTestingHooks(pybind11::module& module);

}  // namespace torch_openreg
