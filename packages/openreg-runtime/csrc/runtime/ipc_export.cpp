// ipc_export.cpp — leases on exported ranges, and frees held back by them.
#include "ipc_export.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <vector>

#include "errors.h"
#include "ipc_lease.h"

#include <sys/stat.h>

namespace openreg::runtime {
namespace {

std::atomic<bool> anythingExported{false};

struct HeldRange {
  DeviceMemory* memory;
  DeviceMemory::Range range;
};

std::mutex heldMutex;
std::vector<HeldRange>* held = new std::vector<HeldRange>();  // never destroyed: used at exit
std::atomic<size_t> heldCount{0};

uintptr_t offsetIn(const DeviceMemory& memory, const void* pointer) {
  return reinterpret_cast<uintptr_t>(pointer) - reinterpret_cast<uintptr_t>(memory.deviceBase());
}

bool leased(DeviceMemory& memory, size_t offset, size_t length) {
  return rangeLockedByOthers(memory.fileDescriptor(), offset, length, F_RDLCK);
}

}  // namespace

orIpcMemHandle_t exportOwnRange(DeviceMemory& memory, const void* pointer, size_t size) {
  // Set before the lease is taken: a free racing with this export then
  // checks for leases (and finds this one, if the allocation was still live).
  anythingExported.store(true);
  const size_t offset = offsetIn(memory, pointer);
  orIpcMemHandle_t handle;
  std::memset(&handle, 0, sizeof(handle));
  handle.fd = leaseRange(memory.fileDescriptor(), offset, size);
  // Checked after the lease: freed before it, the range may be released already.
  std::optional<Allocation> allocation = memory.find(pointer);
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  if (!allocation || size > allocation->base + allocation->size - address) {
    close(handle.fd);
    check(allocation.has_value(), orErrorInvalidDevicePointer, pointer,
          " is not inside a live allocation of device ", memory.device(), " (freed?)");
    fail(orErrorInvalidValue, "range of ", size, " bytes at ", pointer, " overruns its ",
         allocation->size, "-byte allocation at ", reinterpret_cast<void*>(allocation->base));
  }
  struct stat status;
  fstat(memory.fileDescriptor(), &status);
  handle.device = memory.device();
  handle.memoryId = static_cast<unsigned long long>(status.st_ino);
  handle.offset = offset;
  handle.size = size;
  handle.exporterPid = static_cast<int>(getpid());
  return handle;
}

bool ownRangeLeased(DeviceMemory& memory, const void* pointer, size_t size) {
  return leased(memory, offsetIn(memory, pointer), size);
}

void releaseUnlessLeased(DeviceMemory& memory, DeviceMemory::Range range) {
  if (anythingExported.load() && leased(memory, range.offset, range.length)) {
    std::lock_guard<std::mutex> lock(heldMutex);
    held->push_back(HeldRange{&memory, range});
    heldCount.fetch_add(1);
    return;
  }
  memory.reclaim(range);
}

void releaseUnleasedFrees() {
  if (heldCount.load() == 0) return;
  std::vector<HeldRange> released;
  {
    std::lock_guard<std::mutex> lock(heldMutex);
    auto kept = held->begin();
    for (HeldRange& entry : *held) {
      if (leased(*entry.memory, entry.range.offset, entry.range.length)) {
        *kept++ = entry;
      } else {
        released.push_back(entry);
      }
    }
    held->erase(kept, held->end());
    heldCount.store(held->size());
  }
  // Outside the lock: reclaiming punches holes in the memory file.
  for (const HeldRange& entry : released) entry.memory->reclaim(entry.range);
}

}  // namespace openreg::runtime
