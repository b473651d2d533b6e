// ipc_bindings.h — Python bindings of the runtime's IPC API (openreg.h,
// "Interprocess communication"): handles that own their descriptor, and the
// functions that make and open them.
#pragma once

#include <pybind11/pybind11.h>

#include "openreg.h"

namespace openreg_python {

// IpcMemHandle, IpcEventHandle and the ipc_* functions.
void defineIpc(pybind11::module_& m);
// Event.ipc_handle: an IpcEventHandle for `event`.
pybind11::object eventIpcHandle(orEvent_t event);
// Event.from_ipc_handle: a new event handle for another process's event.
orEvent_t openIpcEventHandle(const pybind11::object& handle);

}  // namespace openreg_python
