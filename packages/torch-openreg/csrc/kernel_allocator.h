// kernel_allocator.h — makes CPU kernels allocate openreg device memory.
//
// Operators run as CPU kernels on the device's kernel view. Tensors such a
// kernel creates (its outputs and temporaries) come from c10's CPU allocator;
// this wrapper is installed as that allocator and, while a kernel runs on a
// stream worker for device d (KernelAllocationScope), hands out device memory
// of d through its kernel view instead. Outputs therefore already live on the
// device and are re-labelled, never copied. Outside kernels it forwards to
// the original CPU allocator.
#pragma once

#include <c10/core/Allocator.h>

namespace torch_openreg {

// Installs the wrapper (idempotent). Called when _C is imported.
void installKernelAllocator();

// While alive on this thread, CPU allocations come from `device`'s memory.
class KernelAllocationScope {
 public:
  explicit KernelAllocationScope(c10::DeviceIndex device);
  ~KernelAllocationScope();
  KernelAllocationScope(const KernelAllocationScope&) = delete;
  KernelAllocationScope& operator=(const KernelAllocationScope&) = delete;

 private:
  c10::DeviceIndex previous_;
};

// The allocator that alias storages use when a kernel resizes them.
c10::Allocator* kernelAllocator();

// True if `data` came from the kernel allocator (device memory seen through
// its kernel view).
bool isKernelAllocation(const c10::DataPtr& data);
// Moves such memory into an openreg DataPtr (device-view address), leaving
// `data` empty. Only valid inside kernel work.
c10::DataPtr relabelAsDevice(c10::DataPtr& data);

}  // namespace torch_openreg
