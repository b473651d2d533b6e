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

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/util/SmallVector.h>

#include <atomic>
#include <cstdint>
#include <vector>

namespace torch_openreg {

// Installs the wrapper (idempotent and cheap once done). Called before the
// first kernel is launched, so processes that import the binding but never
// run openreg work (CPU-only users of the autoload shim) keep c10's own CPU
// allocator untouched.
void installKernelAllocator();
bool kernelAllocatorInstalled();

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

// Learned per planned call: which allocation of an output's size became that
// output's result. A CPU kernel may allocate a same-sized scratch buffer first
// (oneDNN's convolution computes into one, then reorders into its result), so
// "the first allocation of that size" is only the starting guess; a kernel
// allocates in the same order for the same signature, so what one call shows
// holds for the next.
class PlacementHints {
 public:
  PlacementHints() = default;
  explicit PlacementHints(size_t outputs) : ordinals_(outputs) {}
  int ordinal(size_t output) const {
    return output < ordinals_.size() ? ordinals_[output].load(std::memory_order_relaxed) : 0;
  }
  void learn(size_t output, int ordinal) {
    if (output < ordinals_.size()) ordinals_[output].store(ordinal, std::memory_order_relaxed);
  }

 private:
  std::vector<std::atomic<int>> ordinals_;
};

// The preallocated outputs of one asynchronous kernel (CPU aliases), offered
// to its CPU kernel. A functional CPU kernel allocates its result itself; while
// this object is alive on the worker, the allocation that the hints name among
// those of an output's storage size (by default the first) is served from
// that output's memory, so the kernel computes its result in place and
// place() has nothing to copy. Freeing such an allocation does nothing: the
// output owns the memory. Assumes, as holds for ATen's CPU kernels, that a
// kernel keeps no allocation past its return; a temporary that gets the
// memory is harmless, since place() then copies the real result over it (and
// teaches the hints where the result came from).
class OutputReservations {
 public:
  OutputReservations(c10::ArrayRef<at::Tensor> outputs, PlacementHints* hints);
  ~OutputReservations();
  OutputReservations(const OutputReservations&) = delete;
  OutputReservations& operator=(const OutputReservations&) = delete;

  // Makes outputs[index] hold `result` (copying unless it is already there).
  void place(size_t index, const at::Tensor& result) const;

  // For the kernel allocator, on every allocation of the kernel: claim()
  // returns output memory to serve it from (null if none); record() notes
  // where it was served; isClaimed() tells output memory from the rest.
  void* claim(size_t nbytes);
  void record(size_t nbytes, void* pointer);
  bool isClaimed(const void* pointer) const;

 private:
  struct Reservation {
    size_t output;  // index into outputs_
    void* data;
    size_t bytes;
    int wanted;     // which allocation of `bytes` bytes to serve from `data`
    bool claimed;
    c10::SmallVector<void*, 4> allocations;  // of `bytes` bytes, in order
  };
  const Reservation* reservationOf(size_t output) const;

  c10::ArrayRef<at::Tensor> outputs_;
  PlacementHints* hints_;
  c10::SmallVector<Reservation, 2> reservations_;
  OutputReservations* enclosing_;  // a kernel calling another one on the worker
};

// How functional kernels' results reached their outputs since the process
// started: computed in place (through a reservation) or copied. For tests and
// for backend authors checking that an operator avoids the extra pass.
struct OutputPlacementCounts {
  uint64_t inPlace;
  uint64_t copied;
};
OutputPlacementCounts outputPlacementCounts();

// The allocator that alias storages use when a kernel resizes them.
c10::Allocator* kernelAllocator();

// True if `data` came from the kernel allocator (device memory seen through
// its kernel view).
bool isKernelAllocation(const c10::DataPtr& data);
// Moves such memory into an openreg DataPtr (device-view address), leaving
// `data` empty. Only valid inside kernel work.
c10::DataPtr relabelAsDevice(c10::DataPtr& data);

}  // namespace torch_openreg
