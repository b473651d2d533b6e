// api_memory.cpp — C entry points for allocation, attributes and translation.
#include <cstdlib>

#include "errors.h"
#include "fault_injection.h"
#include "ipc_export.h"
#include "pending_release.h"
#include "pointer_info.h"
#include "runtime.h"

using namespace openreg::runtime;

namespace {

// Allocates, and when the device is full but frees are waiting for queued
// work, waits for that work and tries again (never inside stream work, which
// may be what the frees wait for).
void* allocateOn(Device& device, size_t size) {
  PendingReleases& pending = pendingReleases();
  pending.releaseCompleted();
  releaseUnleasedFrees();
  try {
    return device.memory().allocate(size);
  } catch (const ApiError& error) {
    if (error.code() != orErrorOutOfMemory || insideStreamWork() ||
        !pending.anyPendingFor(device.index())) {
      throw;
    }
  }
  pending.waitForDevice(device.index());
  return device.memory().allocate(size);
}

}  // namespace

extern "C" {

orError_t orMalloc(void** devPtr, size_t size) {
  return runApi([&] {
    checkNotNull(devPtr, "devPtr");
    *devPtr = nullptr;
    Device& device = Runtime::instance().currentDevice();
    if (size == 0) return;
    if (auto call = injectedFault(FaultKind::Malloc)) {
      fail(orErrorOutOfMemory, "out of memory on OpenReg device ", device.index(), ": allocating ",
           size, " bytes: ", injectedFaultMessage(FaultKind::Malloc, *call), "; unset ",
           faultVariable(FaultKind::Malloc), " to stop it");
    }
    *devPtr = allocateOn(device, size);
  });
}

orError_t orFree(void* devPtr) {
  return runApi([&] {
    if (devPtr == nullptr) return;
    Runtime& runtime = Runtime::instance();
    runtime.requireNotForkedChild();
    Device* device = runtime.deviceContaining(devPtr);
    check(device != nullptr, orErrorInvalidDevicePointer, "orFree: ", devPtr,
          " is not OpenReg device memory (pinned host memory is freed with orFreeHost)");
    DeviceMemory& memory = device->memory();
    const DeviceMemory::Range range = memory.retire(devPtr);
    // Memory another process still maps (a lease, ipc_export.h) is held back.
    pendingReleases().releaseAfter(runtime.unfinishedWork(), device->index(),
                                   [&memory, range] { releaseUnlessLeased(memory, range); });
  });
}

orError_t orMallocHost(void** ptr, size_t size) {
  return runApi([&] {
    checkNotNull(ptr, "ptr");
    *ptr = nullptr;
    if (size == 0) return;
    *ptr = Runtime::instance().hostMemory().allocate(size);
  });
}

orError_t orFreeHost(void* ptr) {
  return runApi([&] {
    if (ptr == nullptr) return;
    Runtime& runtime = Runtime::instance();
    runtime.hostMemory().retire(ptr);
    pendingReleases().releaseAfter(runtime.unfinishedWork(), PendingReleases::kHostMemory,
                                   [ptr] { std::free(ptr); });
  });
}

orError_t orMemGetInfo(size_t* free, size_t* total) {
  return runApi([&] {
    checkNotNull(free, "free");
    checkNotNull(total, "total");
    DeviceMemory& memory = Runtime::instance().currentDevice().memory();
    pendingReleases().releaseCompleted();  // report memory whose frees are done as free
    releaseUnleasedFrees();
    *total = memory.capacity();
    *free = memory.capacity() - memory.bytesInUse();
  });
}

orError_t orPointerGetAttributes(orPointerAttributes* attributes, const void* ptr) {
  return runApi([&] {
    checkNotNull(attributes, "attributes");
    PointerInfo info = classifyPointer(ptr);
    check(!info.staleDeviceAddress, orErrorInvalidDevicePointer, "pointer ", ptr, " is in device ",
          info.device, "'s memory but not in a live allocation (freed?)");
    attributes->type = info.type;
    attributes->device = info.device;
    attributes->devicePointer = info.isDevice() ? const_cast<void*>(ptr) : nullptr;
    attributes->hostPointer = info.type == orMemoryTypeHost ? const_cast<void*>(ptr) : nullptr;
    attributes->allocationBase = reinterpret_cast<void*>(info.base);
    attributes->allocationSize = info.size;
  });
}

orError_t orGetKernelPointer(void** kernelPtr, const void* devPtr) {
  return runApi([&] {
    checkNotNull(kernelPtr, "kernelPtr");
    Device* device = Runtime::instance().deviceContaining(devPtr);
    check(device != nullptr, orErrorInvalidDevicePointer, "orGetKernelPointer: ", devPtr,
          " is not OpenReg device memory");
    *kernelPtr = device->memory().toKernel(devPtr);
  });
}

orError_t orGetDevicePointer(void** devPtr, const void* kernelPtr) {
  return runApi([&] {
    checkNotNull(devPtr, "devPtr");
    Device* device = Runtime::instance().deviceContainingKernelAddress(kernelPtr);
    check(device != nullptr, orErrorInvalidValue, "orGetDevicePointer: ", kernelPtr,
          " is not a kernel address of OpenReg device memory");
    *devPtr = device->memory().toDevice(kernelPtr);
  });
}

orError_t orDeviceGetAddressRange(orDeviceAddressRange* range, int device) {
  return runApi([&] {
    checkNotNull(range, "range");
    const DeviceMemory& memory = Runtime::instance().device(device).memory();
    range->deviceBase = memory.deviceBase();
    range->kernelBase = memory.kernelBase();
    range->size = memory.span();  // its own memory, then the import window
  });
}

}  // extern "C"
