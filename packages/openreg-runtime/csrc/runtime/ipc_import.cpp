// ipc_import.cpp — validating handles, mapping them into the window, unmapping.
#include "ipc_import.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "environment.h"
#include "errors.h"
#include "ipc_lease.h"

#include <sys/mman.h>
#include <sys/stat.h>

namespace openreg::runtime {
namespace {

constexpr const char* kMemoryFilePrefix = "/memfd:openreg-device-";

// The exporter's device index from its memory file's name, or -1 if `fd` is
// not a descriptor of OpenReg device memory.
int exportingDevice(const std::string& description) {
  if (description.rfind(kMemoryFilePrefix, 0) != 0) return -1;
  const char* digits = description.c_str() + std::strlen(kMemoryFilePrefix);
  char* end = nullptr;
  const long device = std::strtol(digits, &end, 10);
  return end != digits && device >= 0 && device < OPENREG_MAX_DEVICES ? static_cast<int>(device)
                                                                      : -1;
}

void reserve(uintptr_t address, size_t length) {
  // Mapping the reservation back over the range drops the file mapping (and
  // with it the lease) and keeps the address space ours.
  mmap(reinterpret_cast<void*>(address), length, PROT_NONE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

}  // namespace

ImportedMemory::ImportedMemory(int device, uintptr_t deviceBase, uintptr_t kernelBase,
                               size_t length)
    : device_(device), deviceBase_(deviceBase), kernelBase_(kernelBase), length_(length) {
  window_.give(0, length);
}

void* ImportedMemory::open(const orIpcMemHandle_t& handle) {
  const std::string description = fileDescription(handle.fd);
  const int exporterDevice = exportingDevice(description);
  check(exporterDevice >= 0, orErrorInvalidValue, "orIpcOpenMemHandle: handle.fd ", handle.fd,
        " is not a descriptor of OpenReg device memory (it is ",
        description.empty() ? "not an open descriptor" : description,
        "); store the descriptor received with the handle in handle.fd");
  check(exporterDevice == handle.device, orErrorInvalidValue,
        "orIpcOpenMemHandle: handle.fd is memory of device ", exporterDevice,
        " but the handle names device ", handle.device);
  struct stat status;
  check(fstat(handle.fd, &status) == 0, orErrorInvalidValue,
        "orIpcOpenMemHandle: cannot stat handle.fd: ", std::strerror(errno));
  check(static_cast<uint64_t>(status.st_ino) == handle.memoryId, orErrorInvalidValue,
        "orIpcOpenMemHandle: handle.fd is not the memory the handle names (memoryId ",
        handle.memoryId, ", descriptor of ", static_cast<uint64_t>(status.st_ino), ")");
  const auto fileSize = static_cast<unsigned long long>(status.st_size);
  check(handle.size > 0 && handle.offset <= fileSize && handle.size <= fileSize - handle.offset,
        orErrorInvalidValue, "orIpcOpenMemHandle: the range of ", handle.size, " bytes at offset ",
        handle.offset, " is not inside the exporter's ", fileSize, "-byte device memory");

  const size_t page = pageSize();
  const size_t pageStart = handle.offset / page * page;
  const size_t slack = handle.offset - pageStart;
  const size_t length = (slack + handle.size + page - 1) / page * page;
  const RangeKey key{handle.memoryId, handle.offset, handle.size};

  std::lock_guard<std::mutex> lock(mutex_);
  if (auto existing = byRange_.find(key); existing != byRange_.end()) {
    ++live_.at(existing->second).opens;
    return reinterpret_cast<void*>(deviceBase_ + existing->second);
  }
  const std::optional<size_t> windowOffset = window_.take(length);
  check(windowOffset.has_value(), orErrorOutOfMemory, "cannot import ", handle.size,
        " bytes into OpenReg device ", device_, ": its import window (", length_,
        " bytes, the device's capacity) holds ", bytesMapped_,
        " bytes of imports and has no room for this one; close imports you no longer use "
        "(orIpcCloseMemHandle) or raise OPENREG_DEVICE_MEMORY");
  const int kept = fcntl(handle.fd, F_DUPFD_CLOEXEC, 0);
  if (kept < 0) {
    const int error = errno;
    window_.give(*windowOffset, length);
    fail(orErrorUnknown, "cannot keep the imported memory's descriptor: ", std::strerror(error));
  }
  const Import import{*windowOffset, length, slack,          handle.memoryId,    handle.offset,
                      handle.size,   kept,   exporterDevice, handle.exporterPid, 1};
  mapOrThrow(import, pageStart);
  bytesMapped_ += length;
  const size_t rangeOffset = *windowOffset + slack;
  live_.emplace(rangeOffset, import);
  byRange_.emplace(key, rangeOffset);
  return reinterpret_cast<void*>(deviceBase_ + rangeOffset);
}

void ImportedMemory::mapOrThrow(const Import& import, size_t filePageOffset) {
  auto mapView = [&](uintptr_t base, int protection) {
    void* at = reinterpret_cast<void*>(base + import.windowOffset);
    void* mapped = mmap(at, import.length, protection, MAP_SHARED | MAP_FIXED, import.fd,
                        static_cast<off_t>(filePageOffset));
    if (mapped == MAP_FAILED) return false;
    // A child forked later cannot use the device; it must not keep the lease either.
    madvise(at, import.length, MADV_DONTFORK);
    return true;
  };
  if (mapView(deviceBase_, PROT_NONE) && mapView(kernelBase_, PROT_READ | PROT_WRITE)) return;
  const int error = errno;
  reserve(deviceBase_ + import.windowOffset, import.length);
  reserve(kernelBase_ + import.windowOffset, import.length);
  ::close(import.fd);
  window_.give(import.windowOffset, import.length);
  fail(orErrorUnknown, "cannot map ", import.length,
       " bytes of imported memory: ", std::strerror(error));
}

std::optional<ImportedMemory::Retired> ImportedMemory::close(void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = live_.find(address - deviceBase_);
  if (found == live_.end()) {
    check(findLocked(address) == nullptr, orErrorInvalidDevicePointer,
          "orIpcCloseMemHandle: ", pointer,
          " points inside an import; pass the pointer orIpcOpenMemHandle returned");
    fail(orErrorInvalidDevicePointer, "orIpcCloseMemHandle: ", pointer,
         " is not memory imported with orIpcOpenMemHandle (or it was closed already)");
  }
  Import& import = found->second;
  if (--import.opens > 0) return std::nullopt;
  Retired retired{import.windowOffset, import.length, import.fd};
  byRange_.erase(RangeKey{import.memoryId, import.fileOffset, import.size});
  live_.erase(found);
  return retired;
}

void ImportedMemory::reclaim(const Retired& retired) {
  reserve(deviceBase_ + retired.windowOffset, retired.length);
  reserve(kernelBase_ + retired.windowOffset, retired.length);
  ::close(retired.fd);
  std::lock_guard<std::mutex> lock(mutex_);
  bytesMapped_ -= retired.length;
  window_.give(retired.windowOffset, retired.length);
}

const ImportedMemory::Import* ImportedMemory::findLocked(uintptr_t address) const {
  const size_t offset = address - deviceBase_;
  auto after = live_.upper_bound(offset);
  if (after == live_.begin()) return nullptr;
  const auto& [start, import] = *std::prev(after);
  return offset < start + import.size ? &import : nullptr;
}

Allocation ImportedMemory::allocationOf(const Import& import) const {
  return Allocation{device_, deviceBase_ + import.windowOffset + import.slack, import.size,
                    import.exporterPid};
}

std::optional<Allocation> ImportedMemory::find(const void* pointer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Import* import = findLocked(reinterpret_cast<uintptr_t>(pointer));
  if (import == nullptr) return std::nullopt;
  return allocationOf(*import);
}

std::optional<Allocation> ImportedMemory::tryFind(const void* pointer) const noexcept {
  if (!mutex_.try_lock()) return std::nullopt;
  const Import* import = findLocked(reinterpret_cast<uintptr_t>(pointer));
  std::optional<Allocation> found;
  if (import != nullptr) found = allocationOf(*import);
  mutex_.unlock();
  return found;
}

const ImportedMemory::Import& ImportedMemory::importContaining(const void* pointer,
                                                               size_t size) const {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  const Import* import = findLocked(address);
  check(import != nullptr, orErrorInvalidDevicePointer, pointer, " is in device ", device_,
        "'s import window but not in a live import (closed?)");
  const uintptr_t end = deviceBase_ + import->windowOffset + import->slack + import->size;
  check(size <= end - address, orErrorInvalidValue, "range of ", size, " bytes at ", pointer,
        " overruns its ", import->size, "-byte import");
  return *import;
}

orIpcMemHandle_t ImportedMemory::exportRange(const void* pointer, size_t size) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Import& import = importContaining(pointer, size);
  const size_t start = deviceBase_ + import.windowOffset + import.slack;
  const size_t fileOffset = import.fileOffset + (reinterpret_cast<uintptr_t>(pointer) - start);
  orIpcMemHandle_t handle;
  std::memset(&handle, 0, sizeof(handle));
  handle.fd = leaseRange(import.fd, fileOffset, size);
  handle.device = import.exporterDevice;
  handle.memoryId = import.memoryId;
  handle.offset = fileOffset;
  handle.size = size;
  handle.exporterPid = import.exporterPid;
  return handle;
}

bool ImportedMemory::leasedByOthers(const void* pointer, size_t size) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Import& import = importContaining(pointer, size);
  const size_t start = deviceBase_ + import.windowOffset + import.slack;
  const size_t fileOffset = import.fileOffset + (reinterpret_cast<uintptr_t>(pointer) - start);
  return rangeLockedByOthers(import.fd, fileOffset, size, F_RDLCK);
}

}  // namespace openreg::runtime
