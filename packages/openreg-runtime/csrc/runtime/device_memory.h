// device_memory.h — one device's memory: a memfd mapped twice.
//
// The "device view" is mapped PROT_NONE: its addresses are what the API hands
// out, and any host access to them faults, at any time. The "kernel view" maps
// the same file pages read-write at a constant offset; work running on a
// stream translates device pointers into it (orGetKernelPointer). Protection
// is therefore never toggled, so kernels pay no system call per operation.
// Address ranges are sub-allocated page-granular with best fit; freeing punches
// a hole in the file so the pages go back to the OS.
//
// Each view reserves twice the capacity: the device's own memory, then an
// equally long window where memory imported from other processes is mapped
// (ipc_import.h). Both views keep the same constant offset over the whole
// span, so translating an imported pointer is the same addition.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>

#include "allocation.h"
#include "free_ranges.h"
#include "ipc_import.h"

namespace openreg::runtime {

class DeviceMemory {
 public:
  DeviceMemory(int device, size_t capacity);
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory();

  // Throws ApiError(orErrorOutOfMemory) when the capacity is exhausted.
  void* allocate(size_t bytes);

  // Freeing has two steps, so that queued work may finish using the memory
  // in between (see pending_release.h). retire() ends the allocation for the
  // API (the pointer is no longer valid, a second free is an error) but keeps
  // its range reserved and counted in use; reclaim() makes it free memory and
  // gives its pages back to the system.
  struct Range {
    size_t offset;
    size_t length;
  };
  // Throws ApiError(orErrorInvalidDevicePointer) unless `pointer` is the start
  // of a live allocation.
  Range retire(void* pointer);
  void reclaim(Range range);

  // The live allocation containing `pointer` (interior pointers included),
  // imported memory included.
  std::optional<Allocation> find(const void* pointer) const;
  // As find(), but never blocks: for the SIGSEGV handler.
  std::optional<Allocation> tryFind(const void* pointer) const noexcept;

  // In the device's address span: its own memory or the import window.
  bool containsDeviceAddress(const void* pointer) const noexcept {
    auto address = reinterpret_cast<uintptr_t>(pointer);
    return address >= deviceBase_ && address - deviceBase_ < span();
  }
  bool containsKernelAddress(const void* pointer) const noexcept {
    auto address = reinterpret_cast<uintptr_t>(pointer);
    return address >= kernelBase_ && address - kernelBase_ < span();
  }
  bool inImportWindow(const void* pointer) const noexcept {
    auto address = reinterpret_cast<uintptr_t>(pointer);
    return address >= deviceBase_ + capacity_ && address - deviceBase_ < span();
  }
  void* toKernel(const void* devicePointer) const noexcept {
    return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(devicePointer) - deviceBase_ +
                                   kernelBase_);
  }
  void* toDevice(const void* kernelPointer) const noexcept {
    return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(kernelPointer) - kernelBase_ +
                                   deviceBase_);
  }

  void* deviceBase() const noexcept { return reinterpret_cast<void*>(deviceBase_); }
  void* kernelBase() const noexcept { return reinterpret_cast<void*>(kernelBase_); }
  size_t capacity() const noexcept { return capacity_; }
  // Bytes of each view: the capacity, then the import window.
  size_t span() const noexcept { return 2 * capacity_; }
  size_t bytesInUse() const;
  // The memfd of the device's own memory (for exporting ranges of it).
  int fileDescriptor() const noexcept { return fileDescriptor_; }
  ImportedMemory& imports() noexcept { return *imports_; }
  int device() const noexcept { return device_; }
  // Keeps `counter` (the process registry's, see device_registry.h) equal to
  // bytesInUse() from now on; nullptr stops publishing.
  void publishBytesInUseTo(std::atomic<uint64_t>* counter);

 private:
  std::optional<Allocation> findLocked(uintptr_t address) const;
  void returnPagesToSystem(size_t offset, size_t length);
  void publishLocked();

  const int device_;
  const size_t capacity_;
  int fileDescriptor_ = -1;
  uintptr_t deviceBase_ = 0;
  uintptr_t kernelBase_ = 0;

  mutable std::mutex mutex_;
  size_t bytesInUse_ = 0;
  std::atomic<uint64_t>* publishedBytesInUse_ = nullptr;  // written under mutex_
  std::map<size_t, size_t> liveByOffset_;  // offset -> length
  FreeRanges free_;
  // Created after both views are mapped (it maps into their second halves).
  std::optional<ImportedMemory> imports_;
};

}  // namespace openreg::runtime
