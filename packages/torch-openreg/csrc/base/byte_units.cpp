// byte_units.cpp — binary units for sizes in messages.
#include "base/byte_units.h"

#include <iomanip>
#include <sstream>

namespace torch_openreg {

std::string humanBytes(size_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < (size_t{1} << 10)) return std::to_string(bytes) + " bytes";
  double value = static_cast<double>(bytes) / 1024.0;
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  std::ostringstream text;
  text << std::fixed << std::setprecision(2) << value << " " << kUnits[unit];
  return text.str();
}

}  // namespace torch_openreg
