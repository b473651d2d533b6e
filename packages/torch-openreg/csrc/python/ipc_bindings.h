// ipc_bindings.h — the _C functions behind sharing tensors and events between
// processes (torch_openreg/_multiprocessing.py, torch.openreg.Event).
#pragma once

#include <pybind11/pybind11.h>

namespace torch_openreg {

void bindIpc(pybind11::module& module);

}  // namespace torch_openreg
