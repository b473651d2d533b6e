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

void* mapView(int fileDescriptor, size_t length, int protection, int device) {
  void* view = mmap(nullptr, length, protection, MAP_SHARED | MAP_NORESERVE, fileDescriptor, 0);
  if (view == MAP_FAILED) {
    fail(orErrorInitialization, "cannot map ", length, " bytes for OpenReg device ", device, ": ",
         std::strerror(errno), " (lower OPENREG_DEVICE_MEMORY)");
  }
  return view;
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
  deviceBase_ = reinterpret_cast<uintptr_t>(mapView(fileDescriptor_, capacity, PROT_NONE, device));
  kernelBase_ = reinterpret_cast<uintptr_t>(
      mapView(fileDescriptor_, capacity, PROT_READ | PROT_WRITE, device));
  insertFreeRange(0, capacity);
}

DeviceMemory::~DeviceMemory() {
  munmap(reinterpret_cast<void*>(deviceBase_), capacity_);
  munmap(reinterpret_cast<void*>(kernelBase_), capacity_);
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
  auto best = freeByLength_.lower_bound({length, 0});
  if (best == freeByLength_.end()) {
    fail(orErrorOutOfMemory, "out of memory on OpenReg device ", device_, ": no contiguous ",
         length, " bytes free (", capacity_ - bytesInUse_,
         " bytes free in total, fragmented); free device memory or raise OPENREG_DEVICE_MEMORY");
  }
  const auto [freeLength, offset] = *best;
  takeFreeRange(offset, freeLength);
  if (freeLength > length) insertFreeRange(offset + length, freeLength - length);
  liveByOffset_.emplace(offset, length);
  bytesInUse_ += length;
  publishLocked();
  return reinterpret_cast<void*>(deviceBase_ + offset);
}

DeviceMemory::Range DeviceMemory::retire(void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
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
  insertFreeRange(range.offset, range.length);
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
  std::lock_guard<std::mutex> lock(mutex_);
  return findLocked(reinterpret_cast<uintptr_t>(pointer));
}

std::optional<Allocation> DeviceMemory::tryFind(const void* pointer) const noexcept {
  if (!containsDeviceAddress(pointer) || !mutex_.try_lock()) return std::nullopt;
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

void DeviceMemory::insertFreeRange(size_t offset, size_t length) {
  // Coalesce with the free neighbours on both sides.
  auto next = freeByOffset_.lower_bound(offset);
  if (next != freeByOffset_.end() && offset + length == next->first) {
    length += next->second;
    takeFreeRange(next->first, next->second);
  }
  auto following = freeByOffset_.lower_bound(offset);
  if (following != freeByOffset_.begin()) {
    auto previous = std::prev(following);
    if (previous->first + previous->second == offset) {
      offset = previous->first;
      length += previous->second;
      takeFreeRange(previous->first, previous->second);
    }
  }
  freeByOffset_.emplace(offset, length);
  freeByLength_.emplace(length, offset);
}

void DeviceMemory::takeFreeRange(size_t offset, size_t length) {
  freeByOffset_.erase(offset);
  freeByLength_.erase({length, offset});
}

}  // namespace openreg::runtime
