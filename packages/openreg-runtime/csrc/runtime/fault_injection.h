// fault_injection.h — making chosen calls fail on purpose (OPENREG_FAULT_*).
//
// Error paths are the least tested code of any program using a device: out of
// memory, a failed copy, a failed kernel. OPENREG_FAULT_MALLOC, _MEMCPY and
// _LAUNCH each list call numbers (counted from 1 in the process) that fail
// with the error a real failure of that call produces, so a user's error
// handling, and our own, can be tested deterministically. Calls are counted
// only once their arguments have been validated, and only while the variable
// lists something, so the counters cost nothing otherwise.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace openreg::runtime {

enum class FaultKind { Malloc, Memcpy, Launch };

// The call numbers to fail, per kind (sorted, without duplicates).
struct FaultPlan {
  std::vector<uint64_t> malloc;
  std::vector<uint64_t> memcpy;
  std::vector<uint64_t> launch;
};

// Parses "3" or "3, 7,12": call numbers counted from 1. nullopt if malformed.
std::optional<std::vector<uint64_t>> parseCallNumbers(const std::string& text);

const char* faultVariable(FaultKind kind);

// Counts a call of `kind`; returns its number if the plan says it must fail.
std::optional<uint64_t> injectedFault(FaultKind kind);

// "orMalloc call 3 failed by fault injection (listed in OPENREG_FAULT_MALLOC)".
std::string injectedFaultMessage(FaultKind kind, uint64_t call);

}  // namespace openreg::runtime
