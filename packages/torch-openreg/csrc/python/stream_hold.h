// stream_hold.h — torch_openreg._C._StreamHold, a test hook that holds a stream.
#pragma once

#include <pybind11/pybind11.h>

namespace torch_openreg {

void bindStreamHold(pybind11::module& module);

}  // namespace torch_openreg
