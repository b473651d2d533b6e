// ipc_export.h — ranges of this process's device memory shared with others.
//
// Exporting a range gives a handle whose descriptor holds a lease on it
// (ipc_lease.h). The exporter keeps such memory alive while leases remain:
// once anything was exported, the stream-ordered release of a freed
// allocation (orFree, pending_release.h) first asks whether another process
// still holds a lease on it; if so the range stays reserved — neither reused
// nor returned to the system, and still counted in use — and is released by
// the first allocation or orMemGetInfo that finds the leases gone. A process
// that never exported anything pays one atomic load per free.
#pragma once

#include <cstddef>

#include "device_memory.h"
#include "openreg.h"

namespace openreg::runtime {

// A handle for [pointer, pointer + size) of a live allocation of `memory`.
orIpcMemHandle_t exportOwnRange(DeviceMemory& memory, const void* pointer, size_t size);
// Whether a lease other than this process's own remains on that range.
bool ownRangeLeased(DeviceMemory& memory, const void* pointer, size_t size);

// orFree's release: reclaims the range now, or once no lease remains on it.
void releaseUnlessLeased(DeviceMemory& memory, DeviceMemory::Range range);
// Reclaims the held ranges whose leases are gone (one atomic load if none).
void releaseUnleasedFrees();

}  // namespace openreg::runtime
