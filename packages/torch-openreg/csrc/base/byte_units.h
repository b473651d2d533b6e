// byte_units.h — sizes as people read them, for error messages.
#pragma once

#include <cstddef>
#include <string>

namespace torch_openreg {

// "1.50 GiB", "20.00 MiB", "512 bytes" (binary units, two decimals).
std::string humanBytes(size_t bytes);

}  // namespace torch_openreg
