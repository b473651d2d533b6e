// pointer_info.cpp — pointer classification over devices and pinned memory.
#include "pointer_info.h"

#include "errors.h"
#include "runtime.h"

namespace openreg::runtime {

PointerInfo classifyPointer(const void* pointer) {
  PointerInfo info;
  Runtime& runtime = Runtime::instance();
  if (Device* device = runtime.deviceContaining(pointer)) {
    info.device = device->index();
    if (auto allocation = device->memory().find(pointer)) {
      info.type = orMemoryTypeDevice;
      info.base = allocation->base;
      info.size = allocation->size;
    } else {
      info.staleDeviceAddress = true;
    }
    return info;
  }
  if (auto pinned = runtime.hostMemory().find(pointer)) {
    info.type = orMemoryTypeHost;
    info.base = pinned->base;
    info.size = pinned->size;
  }
  return info;
}

PointerInfo requireDeviceRange(const void* pointer, size_t count, const char* what) {
  PointerInfo info = classifyPointer(pointer);
  check(!info.staleDeviceAddress, orErrorInvalidDevicePointer, what, " ", pointer, " is in device ",
        info.device, "'s memory but not in a live allocation (freed?)");
  check(info.isDevice(), orErrorInvalidMemcpyDirection, what, " ", pointer,
        " is not device memory");
  check(count <= info.bytesAvailableFrom(pointer), orErrorInvalidValue, what, " range of ", count,
        " bytes at ", pointer, " overruns its ", info.size, "-byte allocation at ",
        reinterpret_cast<void*>(info.base));
  return info;
}

void requirePinnedRange(const PointerInfo& info, const void* pointer, size_t count,
                        const char* what) {
  check(count <= info.bytesAvailableFrom(pointer), orErrorInvalidValue, what, " range of ", count,
        " bytes at ", pointer, " overruns its ", info.size, "-byte pinned allocation at ",
        reinterpret_cast<void*>(info.base));
}

}  // namespace openreg::runtime
