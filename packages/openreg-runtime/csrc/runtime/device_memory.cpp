// device_memory.cpp — memfd double mapping and the page-granular sub-allocator.
#include "device_memory.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "environment.h"
#include "errors.h"

#include <linux/falloc.h>
#include <sys/mman.h>

namespace openreg::runtime {
namespace {

// A view: `span` bytes of address space reserved (inaccessible), the device's
// memory mapped over its first `capacity` bytes; the rest is the import window.
uintptr_t mapView(int fileDescriptor, size_t capacity, size_t span, int protection, int device) {
  void* reserved =
      mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  void* view = reserved == MAP_FAILED
                   ? MAP_FAILED
                   : mmap(reserved, capacity, protection, MAP_SHARED | MAP_NORESERVE | MAP_FIXED,
                          fileDescriptor, 0);
  if (view == MAP_FAILED) {
    const int error = errno;
    if (reserved != MAP_FAILED) munmap(reserved, span);
    fail(orErrorInitialization, "cannot map ", span, " bytes for OpenReg device ", device, ": ",
         std::strerror(error), " (lower OPENREG_DEVICE_MEMORY)");
  }
  return reinterpret_cast<uintptr_t>(view);
}

}  // namespace

DeviceMemory::DeviceMemory(int device, size_t capacity) : device_(device), capacity_(capacity) {
  const std::string name = "openreg-device-" + std::to_string(device);
  fileDescriptor_ = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fileDescriptor_ < 0) {
    fail(orErrorInitialization, "memfd_create failed for device ", device, ": ",
         std::strerror(errno));
  }
  if (ftruncate(fileDescriptor_, static_cast<off_t>(capacity)) != 0) {
    int error = errno;
    close(fileDescriptor_);
    fail(orErrorInitialization, "cannot size device ", device, " memory to ", capacity,
         " bytes: ", std::strerror(error), " (lower OPENREG_DEVICE_MEMORY)");
  }
  deviceBase_ = mapView(fileDescriptor_, capacity, span(), PROT_NONE, device);
  kernelBase_ = mapView(fileDescriptor_, capacity, span(), PROT_READ | PROT_WRITE, device);
  free_.give(0, capacity);
  imports_.emplace(device, deviceBase_ + capacity, kernelBase_ + capacity, capacity);
}

DeviceMemory::~DeviceMemory() {
  imports_.reset();
  munmap(reinterpret_cast<void*>(deviceBase_), span());
  munmap(reinterpret_cast<void*>(kernelBase_), span());
  close(fileDescriptor_);
}

void* DeviceMemory::allocate(size_t bytes) {
  const size_t page = pageSize();
  const size_t length = (bytes + page - 1) / page * page;
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes > capacity_ || bytesInUse_ + length > capacity_) {
    fail(orErrorOutOfMemory, "out of memory on OpenReg device ", device_, ": tried to allocate ",
         bytes, " bytes with ", bytesInUse_, " of ", capacity_,
         " bytes in use; free device memory or raise OPENREG_DEVICE_MEMORY");
  }
  const std::optional<size_t> offset = free_.take(length);
  if (!offset) {
    fail(orErrorOutOfMemory, "out of memory on OpenReg device ", device_, ": no contiguous ",
         length, " bytes free (", capacity_ - bytesInUse_,
         " bytes free in total, fragmented); free device memory or raise OPENREG_DEVICE_MEMORY");
  }
  liveByOffset_.emplace(*offset, length);
  bytesInUse_ += length;
  publishLocked();
  return reinterpret_cast<void*>(deviceBase_ + *offset);
}

DeviceMemory::Range DeviceMemory::retire(void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  check(!inImportWindow(pointer), orErrorInvalidDevicePointer, "orFree: ", pointer,
        " is memory imported from another process (orIpcOpenMemHandle); release it with "
        "orIpcCloseMemHandle");
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t offset = address - deviceBase_;
  auto live = liveByOffset_.find(offset);
  if (live == liveByOffset_.end()) {
    if (findLocked(address)) {
      fail(orErrorInvalidDevicePointer, "orFree: ", pointer,
           " points inside an allocation; pass the pointer orMalloc returned");
    }
    fail(orErrorInvalidDevicePointer, "orFree: ", pointer, " is not a live allocation on device ",
         device_, " (already freed?)");
  }
  const Range range{offset, live->second};
  liveByOffset_.erase(live);
  return range;
}

void DeviceMemory::reclaim(Range range) {
  // Outside the lock: the range is neither live nor free, so nobody can be
  // handed these pages while they are being discarded.
  returnPagesToSystem(range.offset, range.length);
  std::lock_guard<std::mutex> lock(mutex_);
  bytesInUse_ -= range.length;
  publishLocked();
  free_.give(range.offset, range.length);
}

void DeviceMemory::publishBytesInUseTo(std::atomic<uint64_t>* counter) {
  std::lock_guard<std::mutex> lock(mutex_);
  publishedBytesInUse_ = counter;
  publishLocked();
}

void DeviceMemory::publishLocked() {
  if (publishedBytesInUse_ != nullptr) {
    publishedBytesInUse_->store(bytesInUse_, std::memory_order_relaxed);
  }
}

void DeviceMemory::returnPagesToSystem(size_t offset, size_t length) {
  // Punching a hole drops the pages from the memfd; both views then read
  // zeros until written again. Failure only costs memory, so it is ignored.
  (void)fallocate(fileDescriptor_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  static_cast<off_t>(offset), static_cast<off_t>(length));
}

std::optional<Allocation> DeviceMemory::find(const void* pointer) const {
  if (!containsDeviceAddress(pointer)) return std::nullopt;
  if (inImportWindow(pointer)) return imports_->find(pointer);
  std::lock_guard<std::mutex> lock(mutex_);
  return findLocked(reinterpret_cast<uintptr_t>(pointer));
}

std::optional<Allocation> DeviceMemory::tryFind(const void* pointer) const noexcept {
  if (!containsDeviceAddress(pointer)) return std::nullopt;
  if (inImportWindow(pointer)) return imports_->tryFind(pointer);
  if (!mutex_.try_lock()) return std::nullopt;
  std::optional<Allocation> found = findLocked(reinterpret_cast<uintptr_t>(pointer));
  mutex_.unlock();
  return found;
}

std::optional<Allocation> DeviceMemory::findLocked(uintptr_t address) const {
  const size_t offset = address - deviceBase_;
  auto after = liveByOffset_.upper_bound(offset);
  if (after == liveByOffset_.begin()) return std::nullopt;
  auto candidate = std::prev(after);
  if (offset >= candidate->first + candidate->second) return std::nullopt;
  return Allocation{device_, deviceBase_ + candidate->first, candidate->second};
}

size_t DeviceMemory::bytesInUse() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytesInUse_;
}

}  // namespace openreg::runtime
