// address_ranges.h — where each device's memory lives, cached.
//
// The runtime fixes every device's device-view and kernel-view address ranges
// for the life of the process (orDeviceGetAddressRange). Caching them turns
// the translations every operator needs (device pointer -> kernel view for
// CPU aliases, and back for memory a kernel allocated) and the question "is
// this a kernel-view address?" (asked on every free of c10's CPU allocator)
// into arithmetic: no runtime call, no error built and discarded, on the hot
// path.
#pragma once

#include <c10/core/Device.h>

namespace torch_openreg {

// The kernel-view address of `devicePointer`, which must lie in `device`'s
// memory (raises otherwise: a tensor whose data is not openreg memory).
void* toKernelView(const void* devicePointer, c10::DeviceIndex device);

// The device-view address of a kernel-view address (raises if it is none).
void* toDeviceView(const void* kernelPointer);

// The device whose memory holds `devicePointer` (raises if none does).
c10::DeviceIndex deviceOfPointer(const void* devicePointer);

// True if `pointer` is a kernel-view address of a device this process has
// translated pointers of. Never calls the runtime and never fails.
bool isKernelViewAddress(const void* pointer) noexcept;

}  // namespace torch_openreg
