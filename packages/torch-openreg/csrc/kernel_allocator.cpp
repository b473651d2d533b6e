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

class KernelOutputAllocator final : public c10::Allocator {
 public:
  explicit KernelOutputAllocator(c10::Allocator* cpu) : cpu_(cpu) {}

  c10::DataPtr allocate(size_t nbytes) override {
    if (kernelDevice < 0) return cpu_->allocate(nbytes);
    c10::DataPtr device = deviceAllocator().allocateOn(kernelDevice, nbytes);
    if (device.get() == nullptr) return c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU));
    void* kernelPointer = toKernelView(device.get());
    c10::DeleterFnPtr deleter = device.get_deleter();
    void* context = device.release_context();
    return c10::DataPtr(kernelPointer, context, deleter, c10::Device(c10::DeviceType::CPU));
  }

  // raw_allocate() is only meaningful outside kernels (inside, the context is
  // not the data pointer and c10 refuses it with an assertion, not a crash).
  c10::DeleterFnPtr raw_deleter() const override { return cpu_->raw_deleter(); }

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
    static auto* wrapper = new KernelOutputAllocator(c10::GetCPUAllocator());
    c10::SetCPUAllocator(wrapper, /*priority=*/1);
  });
}

KernelAllocationScope::KernelAllocationScope(c10::DeviceIndex device) : previous_(kernelDevice) {
  kernelDevice = device;
}

KernelAllocationScope::~KernelAllocationScope() { kernelDevice = previous_; }

c10::Allocator* kernelAllocator() { return c10::GetCPUAllocator(); }

}  // namespace torch_openreg
