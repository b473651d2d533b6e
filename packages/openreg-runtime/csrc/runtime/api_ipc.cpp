// api_ipc.cpp — C entry points for sharing device memory and events between
// processes (the contract is in openreg.h, "Interprocess communication").
#include <unistd.h>

#include "errors.h"
#include "ipc_export.h"
#include "ipc_import.h"
#include "pending_release.h"
#include "runtime.h"

using namespace openreg::runtime;

namespace {

Device& deviceHolding(const void* pointer, const char* call) {
  Runtime& runtime = Runtime::instance();
  runtime.requireNotForkedChild();
  Device* device = runtime.deviceContaining(pointer);
  check(device != nullptr, orErrorInvalidDevicePointer, call, ": ", pointer,
        " is not OpenReg device memory");
  return *device;
}

// The live allocation (or import) containing `pointer`.
Allocation allocationAt(Device& device, const void* pointer, const char* call) {
  std::optional<Allocation> allocation = device.memory().find(pointer);
  check(allocation.has_value(), orErrorInvalidDevicePointer, call, ": ", pointer, " is in device ",
        device.index(), "'s memory but not in a live allocation (freed?)");
  return *allocation;
}

orIpcMemHandle_t exportRange(Device& device, const void* pointer, size_t size) {
  DeviceMemory& memory = device.memory();
  if (memory.inImportWindow(pointer)) return memory.imports().exportRange(pointer, size);
  return exportOwnRange(memory, pointer, size);
}

}  // namespace

extern "C" {

orError_t orIpcGetMemHandle(orIpcMemHandle_t* handle, void* devPtr) {
  return runApi([&] {
    checkNotNull(handle, "handle");
    Device& device = deviceHolding(devPtr, "orIpcGetMemHandle");
    const Allocation allocation = allocationAt(device, devPtr, "orIpcGetMemHandle");
    check(allocation.base == reinterpret_cast<uintptr_t>(devPtr), orErrorInvalidValue,
          "orIpcGetMemHandle: ", devPtr, " points inside the ", allocation.size,
          "-byte allocation at ", reinterpret_cast<void*>(allocation.base),
          "; pass its start, or use orIpcGetMemRangeHandle for a part of it");
    *handle = exportRange(device, devPtr, allocation.size);
  });
}

orError_t orIpcGetMemRangeHandle(orIpcMemHandle_t* handle, void* devPtr, size_t size) {
  return runApi([&] {
    checkNotNull(handle, "handle");
    check(size > 0, orErrorInvalidValue, "orIpcGetMemRangeHandle: size must be at least 1 byte");
    Device& device = deviceHolding(devPtr, "orIpcGetMemRangeHandle");
    const Allocation allocation = allocationAt(device, devPtr, "orIpcGetMemRangeHandle");
    check(size <= allocation.base + allocation.size - reinterpret_cast<uintptr_t>(devPtr),
          orErrorInvalidValue, "orIpcGetMemRangeHandle: range of ", size, " bytes at ", devPtr,
          " overruns its ", allocation.size, "-byte allocation at ",
          reinterpret_cast<void*>(allocation.base));
    *handle = exportRange(device, devPtr, size);
  });
}

orError_t orIpcOpenMemHandle(void** devPtr, orIpcMemHandle_t handle, unsigned int flags) {
  return runApi([&] {
    checkNotNull(devPtr, "devPtr");
    *devPtr = nullptr;
    check((flags & ~orIpcMemLazyEnablePeerAccess) == 0, orErrorInvalidValue,
          "orIpcOpenMemHandle flags ", flags,
          " contain unsupported bits (only orIpcMemLazyEnablePeerAccess is accepted)");
    Runtime& runtime = Runtime::instance();
    const int count = runtime.deviceCount();
    check(handle.device >= 0 && handle.device < count, orErrorInvalidDevice,
          "orIpcOpenMemHandle: the memory is on device ", handle.device,
          " of the exporting process, but this process has ", count,
          " OpenReg devices (OPENREG_DEVICE_COUNT); give both processes the same "
          "OPENREG_DEVICE_COUNT");
    *devPtr = runtime.device(handle.device).memory().imports().open(handle);
  });
}

orError_t orIpcCloseMemHandle(void* devPtr) {
  return runApi([&] {
    Device& device = deviceHolding(devPtr, "orIpcCloseMemHandle");
    DeviceMemory& memory = device.memory();
    check(memory.inImportWindow(devPtr), orErrorInvalidDevicePointer,
          "orIpcCloseMemHandle: ", devPtr,
          " is memory this process allocated, not an import; free it with orFree");
    ImportedMemory& imports = memory.imports();
    if (auto retired = imports.close(devPtr)) {
      pendingReleases().releaseAfter(
          Runtime::instance().unfinishedWork(), device.index(),
          [&imports, released = *retired] { imports.reclaim(released); });
    }
  });
}

orError_t orIpcMemQuery(const void* devPtr, size_t size) {
  return runApi([&] {
    Device& device = deviceHolding(devPtr, "orIpcMemQuery");
    const Allocation allocation = allocationAt(device, devPtr, "orIpcMemQuery");
    const void* start = devPtr;
    if (size == 0) {
      start = reinterpret_cast<const void*>(allocation.base);
      size = allocation.size;
    }
    check(size <= allocation.base + allocation.size - reinterpret_cast<uintptr_t>(start),
          orErrorInvalidValue, "orIpcMemQuery: range of ", size, " bytes at ", start,
          " overruns its ", allocation.size, "-byte allocation");
    DeviceMemory& memory = device.memory();
    const bool leased = memory.inImportWindow(start) ? memory.imports().leasedByOthers(start, size)
                                                     : ownRangeLeased(memory, start, size);
    check(!leased, orErrorNotReady,
          "another process (or a handle not yet closed) still holds part of the range");
  });
}

orError_t orIpcGetEventHandle(orIpcEventHandle_t* handle, orEvent_t event) {
  return runApi([&] {
    checkNotNull(handle, "handle");
    std::shared_ptr<Event> target = Runtime::instance().events().get(event);
    if (target->exported()) {
      target->exported()->describe(*handle);
    } else if (target->imported()) {
      target->imported()->describe(*handle);
    } else {
      fail(orErrorInvalidResourceHandle,
           "orIpcGetEventHandle: the event was not created with orEventInterprocess; create it "
           "with orEventCreateWithFlags(&event, orEventInterprocess | orEventDisableTiming)");
    }
  });
}

orError_t orIpcOpenEventHandle(orEvent_t* event, orIpcEventHandle_t handle) {
  return runApi([&] {
    checkNotNull(event, "event");
    Runtime& runtime = Runtime::instance();
    runtime.requireNotForkedChild();
    const int count = runtime.deviceCount();
    check(handle.device >= 0 && handle.device < count, orErrorInvalidDevice,
          "orIpcOpenEventHandle: the event is on device ", handle.device,
          " of the exporting process, but this process has ", count,
          " OpenReg devices (OPENREG_DEVICE_COUNT); give both processes the same "
          "OPENREG_DEVICE_COUNT");
    auto imported = std::make_shared<Event>(handle.device, ImportedEvent::open(handle));
    *event = static_cast<orEvent_t>(runtime.events().add(std::move(imported)));
  });
}

}  // extern "C"
