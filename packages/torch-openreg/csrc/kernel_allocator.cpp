// kernel_allocator.cpp — thread-local redirection of CPU allocations.
#include "kernel_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <mutex>

#include "device_allocator.h"
#include "runtime_check.h"

namespace torch_openreg {
namespace {

thread_local c10::DeviceIndex kernelDevice = -1;

void* toKernelView(void* devicePointer) {
  void* kernelPointer = nullptr;
  OPENREG_CHECK(orGetKernelPointer(&kernelPointer, devicePointer));
  return kernelPointer;
}

void* toDeviceView(void* kernelPointer) {
  void* devicePointer = nullptr;
  OPENREG_CHECK(orGetDevicePointer(&devicePointer, kernelPointer));
  return devicePointer;
}

bool isKernelViewAddress(void* pointer) {
  void* devicePointer = nullptr;
  if (orGetDevicePointer(&devicePointer, pointer) == orSuccess) return true;
  orGetLastError();
  return false;
}

// Deleter of kernel allocations: the context is the kernel-view address, as
// c10's raw_allocate() requires.
void freeKernelAllocation(void* kernelPointer) {
  deviceAllocator().freeByPointer(toDeviceView(kernelPointer));
}

c10::DeleterFnPtr cpuRawDeleter = nullptr;

// raw_deleter(): frees either kind, since raw pointers carry no deleter.
void freeRaw(void* pointer) {
  if (isKernelViewAddress(pointer)) {
    freeKernelAllocation(pointer);
  } else if (cpuRawDeleter != nullptr) {
    cpuRawDeleter(pointer);
  }
}

class KernelOutputAllocator final : public c10::Allocator {
 public:
  explicit KernelOutputAllocator(c10::Allocator* cpu) : cpu_(cpu) {}

  c10::DataPtr allocate(size_t nbytes) override {
    if (kernelDevice < 0) return cpu_->allocate(nbytes);
    c10::DataPtr device = deviceAllocator().allocateOn(kernelDevice, nbytes);
    if (device.get() == nullptr) return c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU));
    void* kernelPointer = toKernelView(device.get());
    device.release_context();  // now owned through freeKernelAllocation
    return c10::DataPtr(kernelPointer, kernelPointer, &freeKernelAllocation,
                        c10::Device(c10::DeviceType::CPU));
  }

  c10::DeleterFnPtr raw_deleter() const override { return &freeRaw; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  c10::Allocator* cpu_;
};

}  // namespace

void installKernelAllocator() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Priority 1 outranks the default CPU allocator (registered with 0).
    c10::Allocator* cpu = c10::GetCPUAllocator();
    cpuRawDeleter = cpu->raw_deleter();
    static auto* wrapper = new KernelOutputAllocator(cpu);
    c10::SetCPUAllocator(wrapper, /*priority=*/1);
  });
}

KernelAllocationScope::KernelAllocationScope(c10::DeviceIndex device) : previous_(kernelDevice) {
  kernelDevice = device;
}

KernelAllocationScope::~KernelAllocationScope() { kernelDevice = previous_; }

c10::Allocator* kernelAllocator() { return c10::GetCPUAllocator(); }

bool isKernelAllocation(const c10::DataPtr& data) {
  return data.get_deleter() == &freeKernelAllocation;
}

c10::DataPtr relabelAsDevice(c10::DataPtr& data) {
  void* devicePointer = toDeviceView(data.get());
  data.release_context();
  data = c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU));
  return deviceAllocator().ownerOf(devicePointer);
}

}  // namespace torch_openreg
