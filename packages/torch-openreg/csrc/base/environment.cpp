// environment.cpp — validated reading of OPENREG_* switches.
#include "base/environment.h"

#include <c10/util/Exception.h>

#include <cstdlib>

namespace torch_openreg {

std::string environmentChoice(const char* name, std::initializer_list<const char*> accepted,
                              const char* fallback, const char* help) {
  const char* raw = std::getenv(name);
  const std::string value = raw == nullptr || *raw == '\0' ? fallback : raw;
  for (const char* candidate : accepted) {
    if (value == candidate) return value;
  }
  std::string choices;
  for (const char* candidate : accepted) {
    choices += choices.empty() ? "'" : ", '";
    choices += candidate;
    choices += "'";
  }
  TORCH_CHECK(false, name, "='", value, "' is invalid: use one of ", choices, " (", help,
              "), or unset it");
}

}  // namespace torch_openreg
