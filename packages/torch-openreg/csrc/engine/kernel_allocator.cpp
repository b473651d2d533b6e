// kernel_allocator.cpp — thread-local redirection of CPU allocations.
#include "engine/kernel_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "base/address_ranges.h"
#include "integration/device_allocator.h"

namespace torch_openreg {
namespace {

thread_local c10::DeviceIndex kernelDevice = -1;

// The reservations of the kernel running on this thread, if any.
thread_local OutputReservations* activeReservations = nullptr;

// The output tensor owns reserved memory; the kernel's tensor only borrows it.
void keepReservedOutput(void*) {}

std::atomic<uint64_t> placedInPlace{0};
std::atomic<uint64_t> placedByCopy{0};

bool sameLayout(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.strides() == b.strides() &&
         a.storage_offset() == b.storage_offset() && a.dtype() == b.dtype();
}

// Deleter of kernel allocations: the context is the kernel-view address, as
// c10's raw_allocate() requires.
void freeKernelAllocation(void* kernelPointer) {
  deviceAllocator().freeByPointer(toDeviceView(kernelPointer));
}

c10::DeleterFnPtr cpuRawDeleter = nullptr;

// raw_deleter(): frees either kind, since raw pointers carry no deleter.
void freeRaw(void* pointer) {
  if (activeReservations != nullptr && activeReservations->isClaimed(pointer)) return;
  if (isKernelViewAddress(pointer)) {
    freeKernelAllocation(pointer);
  } else if (cpuRawDeleter != nullptr) {
    cpuRawDeleter(pointer);
  }
}

c10::DataPtr borrowOutput(void* outputMemory) {
  return c10::DataPtr(outputMemory, outputMemory, &keepReservedOutput,
                      c10::Device(c10::DeviceType::CPU));
}

c10::DataPtr allocateOnDevice(size_t nbytes) {
  c10::DataPtr device = deviceAllocator().allocateOn(kernelDevice, nbytes);
  if (device.get() == nullptr) return c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU));
  void* kernelPointer = toKernelView(device.get(), kernelDevice);
  device.release_context();  // now owned through freeKernelAllocation
  return c10::DataPtr(kernelPointer, kernelPointer, &freeKernelAllocation,
                      c10::Device(c10::DeviceType::CPU));
}

// One element of any dtype (complex128 included). A CPU kernel makes such
// tensors for its scalar operands — wrapped numbers, and their casts to the
// computation's dtype — several per call of an optimizer's foreach kernels.
// CUDA keeps a scalar operand on the host too, so these stay host memory:
// a device block costs the pool's lock and bookkeeping, some twenty times a
// host malloc. A result that lands in one is still made device memory (the
// reserved output, or a copy when a synchronous kernel's result is adopted).
constexpr size_t kHostScalarBytes = 16;

class KernelOutputAllocator final : public c10::Allocator {
 public:
  explicit KernelOutputAllocator(c10::Allocator* cpu) : cpu_(cpu) {}

  c10::DataPtr allocate(size_t nbytes) override {
    if (kernelDevice < 0) return cpu_->allocate(nbytes);
    OutputReservations* reservations = activeReservations;
    void* reserved = reservations != nullptr ? reservations->claim(nbytes) : nullptr;
    c10::DataPtr served = reserved != nullptr          ? borrowOutput(reserved)
                          : nbytes <= kHostScalarBytes ? cpu_->allocate(nbytes)
                                                       : allocateOnDevice(nbytes);
    if (reservations != nullptr) reservations->record(nbytes, served.get());
    return served;
  }

  c10::DeleterFnPtr raw_deleter() const override { return &freeRaw; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  c10::Allocator* cpu_;
};

std::atomic<bool> cpuAllocatorWrapped{false};

}  // namespace

bool kernelAllocatorInstalled() { return cpuAllocatorWrapped.load(std::memory_order_acquire); }

void installKernelAllocator() {
  if (cpuAllocatorWrapped.load(std::memory_order_acquire)) return;
  static std::mutex installing;
  std::lock_guard<std::mutex> lock(installing);
  if (cpuAllocatorWrapped.load(std::memory_order_relaxed)) return;
  // Priority 1 outranks the default CPU allocator (registered with 0).
  c10::Allocator* cpu = c10::GetCPUAllocator();
  cpuRawDeleter = cpu->raw_deleter();
  static auto* wrapper = new KernelOutputAllocator(cpu);
  c10::SetCPUAllocator(wrapper, /*priority=*/1);
  cpuAllocatorWrapped.store(true, std::memory_order_release);
}

KernelAllocationScope::KernelAllocationScope(c10::DeviceIndex device) : previous_(kernelDevice) {
  kernelDevice = device;
}

KernelAllocationScope::~KernelAllocationScope() { kernelDevice = previous_; }

OutputReservations::OutputReservations(c10::ArrayRef<at::Tensor> outputs, PlacementHints* hints)
    : outputs_(outputs), hints_(hints), enclosing_(activeReservations) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined() || outputs[i].storage().nbytes() == 0) continue;
    const c10::Storage& storage = outputs[i].storage();
    const int wanted = hints == nullptr ? 0 : hints->ordinal(i);
    reservations_.push_back(
        Reservation{i, storage.mutable_data(), storage.nbytes(), wanted, false, {}});
  }
  activeReservations = this;
}

OutputReservations::~OutputReservations() { activeReservations = enclosing_; }

void* OutputReservations::claim(size_t nbytes) {
  for (Reservation& reservation : reservations_) {
    if (reservation.claimed || reservation.bytes != nbytes) continue;
    if (static_cast<int>(reservation.allocations.size()) == reservation.wanted) {
      reservation.claimed = true;
      return reservation.data;
    }
  }
  return nullptr;
}

void OutputReservations::record(size_t nbytes, void* pointer) {
  // Another output's memory does not count among this output's candidates.
  const bool outputMemory = isClaimed(pointer);
  for (Reservation& reservation : reservations_) {
    if (reservation.bytes != nbytes || reservation.allocations.size() >= 8) continue;
    if (outputMemory && reservation.data != pointer) continue;
    reservation.allocations.push_back(pointer);
  }
}

bool OutputReservations::isClaimed(const void* pointer) const {
  for (const Reservation& reservation : reservations_) {
    if (reservation.claimed && reservation.data == pointer) return true;
  }
  return false;
}

const OutputReservations::Reservation* OutputReservations::reservationOf(size_t output) const {
  for (const Reservation& reservation : reservations_) {
    if (reservation.output == output) return &reservation;
  }
  return nullptr;
}

void OutputReservations::place(size_t index, const at::Tensor& result) const {
  const at::Tensor& output = outputs_[index];
  if (!output.defined() || !result.defined()) return;
  const void* resultData = result.storage().data();
  const bool inOutputMemory = resultData == output.storage().data();
  if (inOutputMemory && sameLayout(result, output)) {  // computed in place
    placedInPlace.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  placedByCopy.fetch_add(1, std::memory_order_relaxed);
  const Reservation* reservation = reservationOf(index);
  if (hints_ != nullptr && reservation != nullptr) {
    // The latest match: a freed scratch buffer's address may come back.
    const auto& seen = reservation->allocations;
    for (size_t k = seen.size(); k-- > 0;) {
      if (seen[k] != resultData) continue;
      hints_->learn(index, static_cast<int>(k));
      break;
    }
  }
  // Same memory, other layout: stage it, as copying within one buffer would
  // overwrite elements before they are read.
  output.copy_(inOutputMemory ? result.clone() : result);
}

OutputPlacementCounts outputPlacementCounts() {
  return {placedInPlace.load(std::memory_order_relaxed),
          placedByCopy.load(std::memory_order_relaxed)};
}

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
