// graph_bindings.h — torch_openreg._C's graph API: the _OpenRegGraph class
// behind torch.openreg.OpenRegGraph, graph pool handles, capture status, and
// the registration behind torch.accelerator.Graph.
#pragma once

#include <pybind11/pybind11.h>

namespace torch_openreg {

void bindGraphs(pybind11::module& module);

}  // namespace torch_openreg
