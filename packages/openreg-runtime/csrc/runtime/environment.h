// environment.h — reads and validates the runtime's environment variables.
//
// Parsing lives apart from the devices so that a bad value produces one
// precise message (variable, value, accepted form) and so that the device
// count can be answered without creating any device.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "fault_injection.h"

namespace openreg::runtime {

// The accepted range of OPENREG_DEVICE_MEMORY (also what a registry reader
// believes of another process's capacity).
constexpr size_t kMinDeviceMemory = size_t{1} << 20;  // 1 MiB
constexpr size_t kMaxDeviceMemory = size_t{1} << 40;  // 1 TiB of address space

struct RuntimeConfig {
  int deviceCount;
  size_t deviceMemoryBytes;  // capacity of each device, page-aligned
  FaultPlan faults;          // OPENREG_FAULT_MALLOC / _MEMCPY / _LAUNCH
};

// Reads OPENREG_DEVICE_COUNT, OPENREG_DEVICE_MEMORY and the OPENREG_FAULT_*
// variables (throws ApiError with orErrorInitialization on invalid values).
RuntimeConfig readConfigFromEnvironment();

// Parses sizes such as "8GiB", "512M", "1.5GiB", "4096". Binary units for
// K/M/G/T with or without "iB"; decimal for KB/MB/GB/TB. nullopt if malformed.
std::optional<size_t> parseByteSize(const std::string& text);

size_t pageSize();

}  // namespace openreg::runtime
