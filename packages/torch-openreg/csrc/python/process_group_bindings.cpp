// process_group_bindings.cpp — creating ProcessGroupOpenReg from Python.
//
// torch_openreg.distributed creates the ProcessGroupGloo (only Python can:
// Gloo's headers are not shipped with torch) and passes it here; the result
// is a plain c10d Backend for torch.distributed, which registers it for the
// openreg device of a ProcessGroup.
#include "python/process_group_bindings.h"

#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include <optional>

#include "distributed/process_group.h"

namespace torch_openreg {

void bindProcessGroup(pybind11::module& module) {
  module.attr("_process_group_backend_name") = kProcessGroupBackendName;
  module.def(
      "_create_process_group",
      [](const c10::intrusive_ptr<c10d::Backend>& gloo, int rank, int size,
         std::optional<int> device,
         std::chrono::milliseconds timeout) -> c10::intrusive_ptr<c10d::Backend> {
        std::optional<c10::DeviceIndex> index;
        if (device) index = static_cast<c10::DeviceIndex>(*device);
        return c10::make_intrusive<ProcessGroupOpenReg>(gloo, rank, size, index, timeout);
      },
      pybind11::arg("gloo"), pybind11::arg("rank"), pybind11::arg("size"), pybind11::arg("device"),
      pybind11::arg("timeout"),
      "The openreg c10d backend over `gloo` (a ProcessGroupGloo of the same ranks).");
}

}  // namespace torch_openreg
