// device_allocator.cpp — the c10::DeviceAllocator over per-device block pools.
//
// Allocation and statistics live in block_pool.cpp; this file is the c10
// interface: DataPtrs (context = Block, deleter = freeBlock), the
// record_stream contract, cache control and memory info.
#include "integration/device_allocator.h"

#include <atomic>

#include "base/address_ranges.h"
#include "base/debug_modes.h"
#include "base/device.h"
#include "base/runtime_check.h"
#include "base/stream_capture.h"
#include "integration/stream.h"
#include "memory/block_pool.h"

namespace torch_openreg {
namespace {

// The deleter of every device DataPtr: the block goes back to its pool in
// stream order (see block_pool.h; streams recorded with record_stream are
// waited for there).
void freeBlock(void* context) {
  auto* block = static_cast<Block*>(context);
  notifyStreamOrder(&StreamOrderObserver::memoryFreed, block->pointer);
  blockPool(block->device).free(block);
}

c10::DataPtr dataPtrOf(Block* block) {
  return c10::DataPtr(block->pointer, block, &freeBlock, openregDevice(block->device));
}

}  // namespace

c10::DataPtr DeviceAllocator::allocate(size_t nbytes) {
  return allocateOn(currentDevice(), nbytes);
}

c10::DataPtr DeviceAllocator::allocateOn(c10::DeviceIndex device, size_t nbytes) {
  if (nbytes == 0) return c10::DataPtr(nullptr, openregDevice(device));
  return allocateOn(device, nbytes, nativeHandle(currentStream(device)));
}

c10::DataPtr DeviceAllocator::allocateOn(c10::DeviceIndex device, size_t nbytes,
                                         orStream_t stream) {
  if (nbytes == 0) return c10::DataPtr(nullptr, openregDevice(device));
  c10::DataPtr data = dataPtrOf(blockPool(device).allocate(nbytes, stream));
  // Owned first: a race report raised here (error mode) frees the block again.
  notifyStreamOrder(&StreamOrderObserver::memoryAllocated, data.get(),
                    static_cast<Block*>(data.get_context())->size, stream);
  return data;
}

c10::DeleterFnPtr DeviceAllocator::raw_deleter() const { return &freeBlock; }

c10::DataPtr DeviceAllocator::ownerOf(void* devicePointer) {
  return dataPtrOf(blockPool(deviceOfPointer(devicePointer)).find(devicePointer));
}

void DeviceAllocator::freeByPointer(void* devicePointer) {
  freeBlock(blockPool(deviceOfPointer(devicePointer)).find(devicePointer));
}

bool DeviceAllocator::owns(const c10::DataPtr& ptr) const {
  return ptr.get_deleter() == &freeBlock && ptr.get() != nullptr;
}

void DeviceAllocator::markShared(const c10::DataPtr& ptr) {
  TORCH_CHECK(owns(ptr), "markShared: not memory of the openreg caching allocator");
  auto* block = static_cast<Block*>(ptr.get_context());
  blockPool(block->device).markShared(block);
}

void DeviceAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  OPENREG_CHECK(orMemcpy(dest, src, count, orMemcpyDeviceToDevice));
}

void DeviceAllocator::emptyCache(c10::MempoolId_t mempool_id) {
  for (c10::DeviceIndex device = 0; device < deviceCount(); ++device) {
    if (!deviceUsed(device)) continue;
    // Releasing the cache waits for the device first.
    checkDeviceWait(device, "empty_cache() (releasing cached memory waits for the device)");
    blockPool(device).emptyCache(mempool_id);
  }
}

void* DeviceAllocator::rawAllocate(c10::DeviceIndex device, size_t nbytes, orStream_t stream) {
  if (nbytes == 0) return nullptr;
  c10::DataPtr data = allocateOn(checkedDevice(device), nbytes, stream);
  auto* block = static_cast<Block*>(data.release_context());
  std::lock_guard<std::mutex> lock(rawMutex_);
  rawAllocations_.emplace(block->pointer, block);
  return block->pointer;
}

void DeviceAllocator::rawDelete(void* devicePointer) {
  if (devicePointer == nullptr) return;
  Block* block = nullptr;
  {
    std::lock_guard<std::mutex> lock(rawMutex_);
    auto found = rawAllocations_.find(devicePointer);
    TORCH_CHECK(found != rawAllocations_.end(), "caching_allocator_delete: ", devicePointer,
                " is not memory from torch.openreg.caching_allocator_alloc that is still allocated "
                "(it was freed already, or belongs to a tensor, which frees its own memory)");
    block = found->second;
    rawAllocations_.erase(found);
  }
  freeBlock(block);
}

void DeviceAllocator::setMemoryFraction(c10::DeviceIndex device, double fraction) {
  TORCH_CHECK(fraction >= 0.0 && fraction <= 1.0, "invalid memory fraction ", fraction,
              ": it must be within [0, 1] (a share of the device's capacity)");
  blockPool(checkedDevice(device)).setMemoryFraction(fraction);
}

double DeviceAllocator::memoryFraction(c10::DeviceIndex device) {
  return blockPool(checkedDevice(device)).memoryFraction();
}

void DeviceAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  if (ptr.get_deleter() != &freeBlock || ptr.get() == nullptr) return;
  auto* block = static_cast<Block*>(ptr.get_context());
  blockPool(block->device).recordStream(block, nativeHandle(stream));
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

namespace {
std::atomic<uint64_t> nextPoolId{1};
}  // namespace

MemPool::MemPool(PoolOptions options)
    : id_{0, nextPoolId.fetch_add(1)}, device_(currentDevice()), options_(options) {
  blockPool(device_).retainPool(id_, options_);
}

MemPool::~MemPool() {
  blockPool(device_).releasePool(id_);
  // Its unused memory goes back now, in stream order (a destructor must not
  // wait for the device: that would take a failure of queued work away from
  // the next synchronizing call). Memory still allocated from it returns with
  // the next empty_cache() once freed, as with CUDA.
  for (c10::DeviceIndex device = 0; device < deviceCount(); ++device) {
    if (device == device_ || deviceUsed(device)) blockPool(device).returnPoolMemory(id_);
  }
}

int MemPool::useCount() const { return blockPool(device_).poolUseCount(id_); }

void MemPool::beginAllocating(c10::DeviceIndex device) const {
  blockPool(checkedDevice(device)).retainPool(id_, options_);
  beginAllocateToPool(device, id_);
}

void MemPool::endAllocating(c10::DeviceIndex device) const {
  endAllocateToPool(device, id_);
  blockPool(checkedDevice(device)).releasePool(id_);
}

DeviceAllocator& deviceAllocator() {
  static DeviceAllocator* allocator = new DeviceAllocator();
  return *allocator;
}

namespace {
// Registered at load time of _C (static initialisation).
const bool allocatorRegistered = [] {
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &deviceAllocator());
  return true;
}();
}  // namespace

}  // namespace torch_openreg
