// device_allocator.cpp — device memory for tensors, with CUDA-style stats.
#include "device_allocator.h"

#include <array>
#include <mutex>
#include <unordered_map>

#include "device.h"
#include "runtime_check.h"

namespace torch_openreg {
namespace {

using c10::CachingDeviceAllocator::DeviceStats;

struct Block {
  void* pointer;
  size_t size;
  c10::DeviceIndex device;
};

struct DeviceState {
  std::mutex mutex;
  DeviceStats stats;
};

std::array<DeviceState, OPENREG_MAX_DEVICES>& states() {
  static auto* all = new std::array<DeviceState, OPENREG_MAX_DEVICES>();
  return *all;
}

// Live allocations by device pointer, for the kernel allocator's raw frees.
std::mutex liveMutex;
std::unordered_map<void*, Block*>& liveBlocks() {
  static auto* blocks = new std::unordered_map<void*, Block*>();
  return *blocks;
}

Block* findLive(void* devicePointer) {
  std::lock_guard<std::mutex> lock(liveMutex);
  auto found = liveBlocks().find(devicePointer);
  TORCH_CHECK(found != liveBlocks().end(), "openreg: ", devicePointer,
              " is not a live allocation of the device allocator");
  return found->second;
}

// Every allocation is its own segment and lives in the aggregate pool.
void record(DeviceStats& stats, size_t bytes, bool allocated) {
  const auto pool = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  for (auto* stat : {&stats.allocation[pool], &stats.segment[pool], &stats.active[pool]}) {
    allocated ? stat->increase(1) : stat->decrease(1);
  }
  for (auto* stat : {&stats.allocated_bytes[pool], &stats.reserved_bytes[pool],
                     &stats.active_bytes[pool], &stats.requested_bytes[pool]}) {
    allocated ? stat->increase(bytes) : stat->decrease(bytes);
  }
  allocated ? ++stats.num_device_alloc : ++stats.num_device_free;
}

template <typename Visit>
void forEachStat(DeviceStats& stats, Visit&& visit) {
  for (auto* array : {&stats.allocation, &stats.segment, &stats.active, &stats.inactive_split,
                      &stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes,
                      &stats.inactive_split_bytes, &stats.requested_bytes}) {
    for (auto& stat : *array) visit(stat);
  }
}

void freeBlock(void* context) {
  auto* block = static_cast<Block*>(context);
  {
    std::lock_guard<std::mutex> lock(liveMutex);
    liveBlocks().erase(block->pointer);
  }
  {
    DeviceState& state = states()[block->device];
    std::lock_guard<std::mutex> lock(state.mutex);
    record(state.stats, block->size, false);
  }
  // Never throw from a deleter: a failure here is a runtime bug, report it.
  if (orFree(block->pointer) != orSuccess) {
    TORCH_WARN("openreg: freeing device memory failed: ", orGetLastErrorMessage());
    orGetLastError();
  }
  delete block;
}

}  // namespace

c10::DataPtr DeviceAllocator::allocate(size_t nbytes) { return allocateOn(currentDevice(), nbytes); }

c10::DataPtr DeviceAllocator::allocateOn(c10::DeviceIndex device, size_t nbytes) {
  const c10::Device where = openregDevice(device);
  if (nbytes == 0) return c10::DataPtr(nullptr, where);
  void* pointer = nullptr;
  {
    DeviceScope scope(device);
    OPENREG_CHECK(orMalloc(&pointer, nbytes));
  }
  markDeviceUsed(device);
  auto* block = new Block{pointer, nbytes, device};
  {
    std::lock_guard<std::mutex> lock(liveMutex);
    liveBlocks().emplace(pointer, block);
  }
  {
    DeviceState& state = states()[device];
    std::lock_guard<std::mutex> lock(state.mutex);
    record(state.stats, nbytes, true);
  }
  return c10::DataPtr(pointer, block, &freeBlock, where);
}

c10::DeleterFnPtr DeviceAllocator::raw_deleter() const { return &freeBlock; }

c10::DataPtr DeviceAllocator::ownerOf(void* devicePointer) {
  Block* block = findLive(devicePointer);
  return c10::DataPtr(devicePointer, block, &freeBlock, openregDevice(block->device));
}

void DeviceAllocator::freeByPointer(void* devicePointer) { freeBlock(findLive(devicePointer)); }

void DeviceAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  OPENREG_CHECK(orMemcpy(dest, src, count, orMemcpyDeviceToDevice));
}

void DeviceAllocator::emptyCache(c10::MempoolId_t /*mempool_id*/) {
  // Nothing is cached: every free already returned memory to the runtime.
}

void DeviceAllocator::recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/) {
  // Memory is returned to the runtime only when its last user is gone and
  // kernels run synchronously, so no stream can still be using it.
}

c10::CachingDeviceAllocator::DeviceStats DeviceAllocator::getDeviceStats(c10::DeviceIndex device) {
  DeviceState& state = states()[checkedDevice(device)];
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.stats;
}

void DeviceAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  DeviceState& state = states()[checkedDevice(device)];
  std::lock_guard<std::mutex> lock(state.mutex);
  forEachStat(state.stats, [](c10::CachingAllocator::Stat& stat) { stat.reset_accumulated(); });
  state.stats.num_alloc_retries = 0;
  state.stats.num_ooms = 0;
  state.stats.num_device_alloc = 0;
  state.stats.num_device_free = 0;
}

void DeviceAllocator::resetPeakStats(c10::DeviceIndex device) {
  DeviceState& state = states()[checkedDevice(device)];
  std::lock_guard<std::mutex> lock(state.mutex);
  forEachStat(state.stats, [](c10::CachingAllocator::Stat& stat) { stat.reset_peak(); });
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
