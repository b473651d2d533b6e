// process_group_bindings.h — the _C functions behind torch_openreg.distributed.
#pragma once

#include <pybind11/pybind11.h>

namespace torch_openreg {

void bindProcessGroup(pybind11::module& module);

}  // namespace torch_openreg
