// device_allocator.cpp — the c10::DeviceAllocator over per-device block pools.
//
// Allocation and statistics live in block_pool.cpp; this file is the c10
// interface: DataPtrs (context = Block, deleter = freeBlock), the
// record_stream contract, cache control and memory info.
#include "integration/device_allocator.h"

#include <atomic>
#include <memory>
#include <vector>

#include "base/address_ranges.h"
#include "base/debug_modes.h"
#include "base/device.h"
#include "base/kernel_thread.h"
#include "memory/block_pool.h"
#include "base/runtime_check.h"
#include "integration/stream.h"

namespace torch_openreg {
namespace {

void releaseToPool(Block* block) { blockPool(block->device).release(block); }

// The deleter of every device DataPtr. Memory a recorded stream may still be
// using goes back to the pool only after that stream's queued work (CUDA's
// record_stream contract); otherwise at once, since the kernels that used it
// held references to it until they completed.
void freeBlock(void* context) {
  auto* block = static_cast<Block*>(context);
  notifyStreamOrder(&StreamOrderObserver::memoryFreed, block->pointer);
  auto pending = blockPool(block->device).takePendingUses(block);
  if (pending.empty()) {
    releaseToPool(block);
    return;
  }
  auto remaining = std::make_shared<std::atomic<size_t>>(pending.size());
  for (const auto& [stream, event] : pending) {
    orEventDestroy(event);
    const orError_t status = openreg::launchHostFunc(stream, [block, remaining] {
      if (remaining->fetch_sub(1) == 1) releaseToPool(block);
    });
    if (status != orSuccess && remaining->fetch_sub(1) == 1) releaseToPool(block);
  }
}

c10::DataPtr dataPtrOf(Block* block) {
  return c10::DataPtr(block->pointer, block, &freeBlock, openregDevice(block->device));
}

}  // namespace

c10::DataPtr DeviceAllocator::allocate(size_t nbytes) { return allocateOn(currentDevice(), nbytes); }

c10::DataPtr DeviceAllocator::allocateOn(c10::DeviceIndex device, size_t nbytes) {
  if (nbytes == 0) return c10::DataPtr(nullptr, openregDevice(device));
  return allocateOn(device, nbytes, nativeHandle(currentStream(device)));
}

c10::DataPtr DeviceAllocator::allocateOn(c10::DeviceIndex device, size_t nbytes, orStream_t stream) {
  if (nbytes == 0) return c10::DataPtr(nullptr, openregDevice(device));
  Block* block = blockPool(device).allocate(nbytes, stream);
  if (!insideKernel()) notifyStreamOrder(&StreamOrderObserver::memoryAllocated, block->pointer, block->size);
  return dataPtrOf(block);
}

c10::DeleterFnPtr DeviceAllocator::raw_deleter() const { return &freeBlock; }

c10::DataPtr DeviceAllocator::ownerOf(void* devicePointer) {
  return dataPtrOf(blockPool(deviceOfPointer(devicePointer)).find(devicePointer));
}

void DeviceAllocator::freeByPointer(void* devicePointer) {
  freeBlock(blockPool(deviceOfPointer(devicePointer)).find(devicePointer));
}

void DeviceAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  OPENREG_CHECK(orMemcpy(dest, src, count, orMemcpyDeviceToDevice));
}

void DeviceAllocator::emptyCache(c10::MempoolId_t /*mempool_id*/) {
  for (c10::DeviceIndex device = 0; device < deviceCount(); ++device) {
    if (deviceUsed(device)) blockPool(device).emptyCache();
  }
}

void DeviceAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  // Kernels keep the tensors they use alive until they have run; this covers
  // memory used on a stream without such a reference (CUDA semantics).
  if (ptr.get_deleter() != &freeBlock || ptr.get() == nullptr) return;
  orStream_t handle = nativeHandle(stream);
  orEvent_t event = nullptr;
  {
    DeviceScope scope(stream.device_index());
    OPENREG_CHECK(orEventCreateWithFlags(&event, orEventDisableTiming));
  }
  const orError_t recorded = orEventRecord(event, handle);
  if (recorded != orSuccess) orEventDestroy(event);
  OPENREG_CHECK(recorded);
  auto* block = static_cast<Block*>(ptr.get_context());
  blockPool(block->device).recordUse(block, handle, event);
  notifyStreamOrder(&StreamOrderObserver::streamRecorded, block->pointer, stream);
}

c10::CachingDeviceAllocator::DeviceStats DeviceAllocator::getDeviceStats(c10::DeviceIndex device) {
  return blockPool(checkedDevice(device)).stats();
}

void DeviceAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  blockPool(checkedDevice(device)).resetAccumulatedStats();
}

void DeviceAllocator::resetPeakStats(c10::DeviceIndex device) {
  blockPool(checkedDevice(device)).resetPeakStats();
}

std::pair<size_t, size_t> DeviceAllocator::getMemoryInfo(c10::DeviceIndex device) {
  DeviceScope scope(checkedDevice(device));
  size_t free = 0, total = 0;
  OPENREG_CHECK(orMemGetInfo(&free, &total));
  return {free, total};
}

DeviceAllocator& deviceAllocator() {
  static DeviceAllocator* allocator = new DeviceAllocator();
  return *allocator;
}

namespace {
// Registered at load time of _C (static initialisation).
const bool registered = [] {
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &deviceAllocator());
  return true;
}();
}  // namespace

}  // namespace torch_openreg
