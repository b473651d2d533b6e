// pointer_info.h — what kind of memory a pointer refers to.
//
// Shared by orPointerGetAttributes and the memcpy/memset validation, so the
// rules for "device", "pinned", "pageable" and "stale device address" live in
// one place.
#pragma once

#include <cstddef>
#include <cstdint>

#include "openreg.h"

namespace openreg::runtime {

struct PointerInfo {
  orMemoryType type = orMemoryTypeUnregistered;
  int device = -1;
  uintptr_t base = 0;  // containing allocation
  size_t size = 0;
  // The address lies in a device's memory range but in no live allocation
  // (freed, or never allocated). Such pointers must never be used.
  bool staleDeviceAddress = false;

  bool isDevice() const { return type == orMemoryTypeDevice; }
  // Bytes from `pointer` to the end of its allocation.
  size_t bytesAvailableFrom(const void* pointer) const {
    return base + size - reinterpret_cast<uintptr_t>(pointer);
  }
};

PointerInfo classifyPointer(const void* pointer);

// Throws unless [pointer, pointer + count) is inside one live device allocation.
PointerInfo requireDeviceRange(const void* pointer, size_t count, const char* what);
// Throws unless [pointer, pointer + count) is inside the pinned allocation
// `info` describes (from classifyPointer).
void requirePinnedRange(const PointerInfo& info, const void* pointer, size_t count,
                        const char* what);

}  // namespace openreg::runtime
