// allocation.h — what a device pointer belongs to, as pointer queries report it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace openreg::runtime {

struct Allocation {
  int device;
  uintptr_t base;       // device-view address
  size_t size;          // bytes reserved (page multiple); for an import, the bytes imported
  int exporterPid = 0;  // for memory imported from another process: that process
};

}  // namespace openreg::runtime
