// debug_modes.cpp — OPENREG_DEBUG / OPENREG_DEBUG_RACES, read once at load.
#include "base/debug_modes.h"

#include <c10/util/Exception.h>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "base/environment.h"

namespace torch_openreg {
namespace {

struct NamedMode {
  const char* name;
  DebugMode mode;
};
constexpr NamedMode kModes[] = {
    {"races", kDebugRaces}, {"poison", kDebugPoison}, {"chaos", kDebugChaos}};

std::string trimmed(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

unsigned modesFromEnvironment() {
  const char* raw = std::getenv("OPENREG_DEBUG");
  return raw == nullptr ? 0 : parseDebugModes(raw, "OPENREG_DEBUG");
}

bool raiseFromEnvironment() {
  return environmentChoice("OPENREG_DEBUG_RACES", {"report", "error"}, "report",
                           "'report' warns at each race and prints a summary at exit; 'error' "
                           "raises at the call that races") == "error";
}

std::atomic<bool> raceErrors{false};
std::atomic<StreamOrderObserver*> observer{nullptr};

}  // namespace

namespace detail {
std::atomic<unsigned> debugModeBits{0};
}  // namespace detail

unsigned parseDebugModes(const std::string& list, const char* source) {
  unsigned modes = 0;
  std::istringstream items(list);
  std::string item;
  while (std::getline(items, item, ',')) {
    item = trimmed(item);
    if (item.empty()) continue;
    bool known = false;
    for (const NamedMode& named : kModes) {
      if (item == named.name) {
        modes |= named.mode;
        known = true;
      }
    }
    TORCH_CHECK(known, source, "='", list, "' is invalid: '", item,
                "' is not a debug mode. Use a comma-separated list of 'races' (report stream "
                "races), 'poison' (fill new and freed memory with NaN/0xFF bytes) and 'chaos' "
                "(randomised, seeded stream scheduling), e.g. OPENREG_DEBUG=races,poison");
  }
  return modes;
}

std::string debugModeNames(unsigned modes) {
  std::string names;
  for (const NamedMode& named : kModes) {
    if ((modes & named.mode) == 0) continue;
    if (!names.empty()) names += ",";
    names += named.name;
  }
  return names;
}

void setDebugModes(unsigned modes) {
  detail::debugModeBits.store(modes, std::memory_order_relaxed);
}

bool raceErrorsRaise() { return raceErrors.load(std::memory_order_relaxed); }
void setRaceErrorsRaise(bool raise) { raceErrors.store(raise, std::memory_order_relaxed); }

StreamOrderObserver* streamOrderObserver() { return observer.load(std::memory_order_acquire); }
void installStreamOrderObserver(StreamOrderObserver* installed) {
  observer.store(installed, std::memory_order_release);
}

// Read when torch_openreg initialises (import), so a child process inherits
// the modes with its environment; invalid values raise there, with the
// accepted values, rather than in a static initialiser where an exception
// would abort without a message.
void readDebugEnvironment() {
  setRaceErrorsRaise(raiseFromEnvironment());
  setDebugModes(modesFromEnvironment());
}

std::optional<c10::Scalar> typedPoisonValue(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Char:
      return c10::Scalar(std::numeric_limits<int8_t>::min());
    case c10::ScalarType::Short:
      return c10::Scalar(std::numeric_limits<int16_t>::min());
    case c10::ScalarType::Int:
      return c10::Scalar(std::numeric_limits<int32_t>::min());
    case c10::ScalarType::Long:
      return c10::Scalar(static_cast<int64_t>(UINT64_C(0x9E3779B97F4A7C15)));
    case c10::ScalarType::Float8_e4m3fnuz:
    case c10::ScalarType::Float8_e5m2fnuz:
      return c10::Scalar(std::numeric_limits<double>::quiet_NaN());
    default:
      return std::nullopt;
  }
}

}  // namespace torch_openreg
