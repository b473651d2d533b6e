// fault_injection.cpp — per-kind call counters checked against OPENREG_FAULT_*.
#include "fault_injection.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "runtime.h"

namespace openreg::runtime {
namespace {

std::array<std::atomic<uint64_t>, 3> callCounters{};

const std::vector<uint64_t>& plannedCalls(FaultKind kind) {
  const FaultPlan& plan = Runtime::instance().config().faults;
  switch (kind) {
    case FaultKind::Malloc:
      return plan.malloc;
    case FaultKind::Memcpy:
      return plan.memcpy;
    case FaultKind::Launch:
      return plan.launch;
  }
  return plan.launch;
}

const char* callName(FaultKind kind) {
  switch (kind) {
    case FaultKind::Malloc:
      return "orMalloc call ";
    case FaultKind::Memcpy:
      return "orMemcpy call ";
    case FaultKind::Launch:
      return "launched work ";
  }
  return "call ";
}

std::optional<uint64_t> parseOne(const std::string& text) {
  if (text.empty() || !std::all_of(text.begin(), text.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
      })) {
    return std::nullopt;
  }
  errno = 0;
  const unsigned long long value = std::strtoull(text.c_str(), nullptr, 10);
  if (errno == ERANGE || value == 0) return std::nullopt;
  return static_cast<uint64_t>(value);
}

std::string trimmed(const std::string& text) {
  const auto notSpace = [](char c) { return !std::isspace(static_cast<unsigned char>(c)); };
  auto begin = std::find_if(text.begin(), text.end(), notSpace);
  auto end = std::find_if(text.rbegin(), text.rend(), notSpace).base();
  return begin < end ? std::string(begin, end) : std::string();
}

}  // namespace

std::optional<std::vector<uint64_t>> parseCallNumbers(const std::string& text) {
  std::vector<uint64_t> calls;
  std::istringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    std::optional<uint64_t> call = parseOne(trimmed(item));
    if (!call) return std::nullopt;
    calls.push_back(*call);
  }
  if (calls.empty() || text.back() == ',') return std::nullopt;
  std::sort(calls.begin(), calls.end());
  calls.erase(std::unique(calls.begin(), calls.end()), calls.end());
  return calls;
}

const char* faultVariable(FaultKind kind) {
  switch (kind) {
    case FaultKind::Malloc:
      return "OPENREG_FAULT_MALLOC";
    case FaultKind::Memcpy:
      return "OPENREG_FAULT_MEMCPY";
    case FaultKind::Launch:
      return "OPENREG_FAULT_LAUNCH";
  }
  return "OPENREG_FAULT_*";
}

std::optional<uint64_t> injectedFault(FaultKind kind) {
  const std::vector<uint64_t>& calls = plannedCalls(kind);
  if (calls.empty()) return std::nullopt;
  const uint64_t call = callCounters[static_cast<size_t>(kind)].fetch_add(1) + 1;
  if (!std::binary_search(calls.begin(), calls.end(), call)) return std::nullopt;
  return call;
}

std::string injectedFaultMessage(FaultKind kind, uint64_t call) {
  std::ostringstream message;
  message << callName(kind) << call << " failed by fault injection (listed in "
          << faultVariable(kind) << ")";
  return message.str();
}

}  // namespace openreg::runtime
