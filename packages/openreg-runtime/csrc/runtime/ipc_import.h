// ipc_import.h — memory imported from other processes, mapped into a device's
// import window.
//
// A device reserves, after its own memory, a window of the same length in
// both views (device_memory.h). Importing a range maps the pages that cover
// it from the exporter's memory file over a free part of the window, in both
// views at the same offset (MAP_FIXED), so the kernel view stays a constant
// offset from the device view and pointer queries, copies and the fault
// handler treat the range as device memory of this device. The mapping is
// made through the handle's own open file description, which carries the
// exporter's lease (ipc_lease.h): the lease lasts exactly as long as the
// mapping. Closing the last open of a range unmaps it stream-ordered, by
// mapping the reservation back over it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

#include "allocation.h"
#include "free_ranges.h"
#include "openreg.h"

namespace openreg::runtime {

class ImportedMemory {
 public:
  ImportedMemory(int device, uintptr_t deviceBase, uintptr_t kernelBase, size_t length);
  ImportedMemory(const ImportedMemory&) = delete;
  ImportedMemory& operator=(const ImportedMemory&) = delete;

  // Maps the handle's range (validated against the file it names) and returns
  // the device pointer of its first byte. A range already open here returns
  // the same pointer, counted: every open is closed once.
  void* open(const orIpcMemHandle_t& handle);

  // What closing the last open of an import leaves to release.
  struct Retired {
    size_t windowOffset;
    size_t length;
    int fd;
  };
  // Ends one open of `pointer`, which must be a pointer open() returned. The
  // last one retires the import (its pointer is invalid from now on) and
  // returns what reclaim() releases once queued work no longer uses it.
  std::optional<Retired> close(void* pointer);
  // Unmaps (the lease goes with the mapping) and frees the window range.
  void reclaim(const Retired& retired);

  std::optional<Allocation> find(const void* pointer) const;
  std::optional<Allocation> tryFind(const void* pointer) const noexcept;

  // For [pointer, pointer + size) inside one import: a handle of the same
  // bytes (re-export: a new lease on the exporter's file), and whether leases
  // other than this import's remain on them.
  orIpcMemHandle_t exportRange(const void* pointer, size_t size) const;
  bool leasedByOthers(const void* pointer, size_t size) const;

 private:
  struct Import {
    size_t windowOffset;  // start of the mapped pages in the window
    size_t length;        // bytes mapped (whole pages)
    size_t slack;         // bytes from the first mapped page to the range
    uint64_t memoryId;
    size_t fileOffset;  // the range in the exporter's file
    size_t size;
    int fd;  // keeps the handle's description (and its lease): for re-export and queries
    int exporterDevice;
    int exporterPid;
    int opens;
  };
  using RangeKey = std::tuple<uint64_t, size_t, size_t>;  // memoryId, file offset, size

  const Import& importContaining(const void* pointer, size_t size) const;  // throws
  const Import* findLocked(uintptr_t address) const;
  Allocation allocationOf(const Import& import) const;
  void mapOrThrow(const Import& import, size_t filePageOffset);

  const int device_;
  const uintptr_t deviceBase_;  // window start, device view
  const uintptr_t kernelBase_;  // window start, kernel view
  const size_t length_;

  mutable std::mutex mutex_;
  FreeRanges window_;
  size_t bytesMapped_ = 0;
  std::map<size_t, Import> live_;  // by offset of the range's first byte in the window
  std::map<RangeKey, size_t> byRange_;
};

}  // namespace openreg::runtime
