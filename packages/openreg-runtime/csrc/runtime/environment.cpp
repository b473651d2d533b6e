// environment.cpp — OPENREG_DEVICE_COUNT / OPENREG_DEVICE_MEMORY parsing.
#include "environment.h"

#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "chaos.h"
#include "errors.h"

namespace openreg::runtime {
namespace {

constexpr int kDefaultDeviceCount = 2;

std::string trim(const std::string& text) {
  size_t begin = 0, end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  return text.substr(begin, end - begin);
}

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::optional<double> unitMultiplier(const std::string& unit) {
  const std::string u = lower(unit);
  if (u.empty() || u == "b") return 1.0;
  if (u == "k" || u == "kib") return 1024.0;
  if (u == "m" || u == "mib") return 1024.0 * 1024;
  if (u == "g" || u == "gib") return 1024.0 * 1024 * 1024;
  if (u == "t" || u == "tib") return 1024.0 * 1024 * 1024 * 1024;
  if (u == "kb") return 1e3;
  if (u == "mb") return 1e6;
  if (u == "gb") return 1e9;
  if (u == "tb") return 1e12;
  return std::nullopt;
}

int readDeviceCount() {
  const char* raw = std::getenv("OPENREG_DEVICE_COUNT");
  if (raw == nullptr || trim(raw).empty()) return kDefaultDeviceCount;
  const std::string text = trim(raw);
  char* end = nullptr;
  long value = std::strtol(text.c_str(), &end, 10);
  bool wellFormed = end != nullptr && *end == '\0';
  if (!wellFormed || value < 1 || value > OPENREG_MAX_DEVICES) {
    fail(orErrorInitialization, "OPENREG_DEVICE_COUNT='", text,
         "' is invalid: set it to an integer from 1 to ", OPENREG_MAX_DEVICES,
         " (or unset it for the default of ", kDefaultDeviceCount, ")");
  }
  return static_cast<int>(value);
}

size_t physicalMemoryBytes() {
  long pages = sysconf(_SC_PHYS_PAGES);
  if (pages <= 0) return size_t{8} << 30;  // unknown: assume 8 GiB
  return static_cast<size_t>(pages) * pageSize();
}

size_t roundUpToPage(size_t bytes) {
  const size_t page = pageSize();
  return (bytes + page - 1) / page * page;
}

std::string sizeProblem(const std::string& text, size_t bytes) {
  // A bare number is bytes, which surprises anyone who meant MiB: say so.
  const bool bareNumber = text.find_first_not_of("0123456789") == std::string::npos;
  std::ostringstream problem;
  if (bareNumber) problem << "a bare number is bytes: ";
  problem << bytes << " bytes is "
          << (bytes < kMinDeviceMemory ? "below the 1MiB minimum" : "above the 1TiB maximum")
          << "; ";
  return problem.str();
}

size_t readDeviceMemory() {
  const char* raw = std::getenv("OPENREG_DEVICE_MEMORY");
  if (raw == nullptr || trim(raw).empty()) return roundUpToPage(physicalMemoryBytes() / 4);
  const std::string text = trim(raw);
  std::optional<size_t> bytes = parseByteSize(text);
  if (!bytes || *bytes < kMinDeviceMemory || *bytes > kMaxDeviceMemory) {
    fail(
        orErrorInitialization, "OPENREG_DEVICE_MEMORY='", text,
        "' is invalid: ", bytes ? sizeProblem(text, *bytes) : std::string(),
        "give a size from 1MiB to 1TiB such as '8GiB' or '512MiB' (K/M/G/T and KiB/MiB/GiB/TiB are "
        "binary, KB/MB/GB/TB decimal, a bare number is bytes), or unset it for a quarter of "
        "physical RAM per device");
  }
  return roundUpToPage(*bytes);
}

std::vector<uint64_t> readFaultCalls(FaultKind kind) {
  const char* name = faultVariable(kind);
  const char* raw = std::getenv(name);
  if (raw == nullptr || trim(raw).empty()) return {};
  const std::string text = trim(raw);
  std::optional<std::vector<uint64_t>> calls = parseCallNumbers(text);
  if (!calls) {
    fail(orErrorInitialization, name, "='", text,
         "' is invalid: list the call numbers counted from 1 that must fail, such as '3' or "
         "'3,4' (or unset it to inject no faults)");
  }
  return *calls;
}

}  // namespace

size_t pageSize() {
  static const size_t size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

std::optional<size_t> parseByteSize(const std::string& raw) {
  const std::string text = trim(raw);
  size_t numberEnd = 0;
  while (numberEnd < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[numberEnd])) || text[numberEnd] == '.')) {
    ++numberEnd;
  }
  if (numberEnd == 0) return std::nullopt;
  char* end = nullptr;
  const std::string number = text.substr(0, numberEnd);
  double value = std::strtod(number.c_str(), &end);
  if (end == nullptr || *end != '\0' || !std::isfinite(value)) return std::nullopt;
  std::optional<double> multiplier = unitMultiplier(trim(text.substr(numberEnd)));
  if (!multiplier) return std::nullopt;
  double bytes = value * *multiplier;
  if (bytes < 0 || bytes > 1.8e19) return std::nullopt;
  return static_cast<size_t>(bytes);
}

RuntimeConfig readConfigFromEnvironment() {
  FaultPlan faults{readFaultCalls(FaultKind::Malloc), readFaultCalls(FaultKind::Memcpy),
                   readFaultCalls(FaultKind::Launch)};
  chaos::configureFromEnvironment();
  return RuntimeConfig{readDeviceCount(), readDeviceMemory(), std::move(faults)};
}

}  // namespace openreg::runtime
