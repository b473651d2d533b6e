// block_pool_shared.cpp — blocks whose memory other processes map.
//
// CUDA's rule (CudaIPCSentData and its limbo): memory sent to another process
// must not be reused while that process may still use it, however long it
// keeps it, and it must be reusable once the process lets go — also when it
// dies without a word. The runtime keeps the account (openreg.h,
// "Interprocess communication"): a lease on a range of device memory lives as
// long as a handle's descriptor or another process's mapping of it, and
// orIpcMemQuery tells whether any remains. So a shared block freed here is
// held — still allocated, in the statistics too — and freed for real by the
// first collection that finds no lease on it: at an allocation of this pool
// (at most once a millisecond), before it reports out of memory, at
// empty_cache, or at torch.openreg.ipc_collect.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

#include "base/brief_lock.h"
#include "base/runtime_check.h"
#include "memory/block_pool.h"

namespace torch_openreg {
namespace {

constexpr int64_t kCollectionPeriodNs = 1'000'000;

// Whether another process (or a handle not yet sent) still holds part of the block.
bool leasedElsewhere(const Block& block) {
  const orError_t status = orIpcMemQuery(block.pointer, block.size);
  if (status == orErrorNotReady) {
    orGetLastError();  // an answer, not an error
    return true;
  }
  // Any other failure: the runtime no longer knows the range as shared.
  if (status != orSuccess) orGetLastError();
  return false;
}

int64_t nowNanoseconds() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void BlockPool::markShared(Block* block) {
  const auto lock = lockBriefly(mutex_);
  block->shared = true;
}

bool BlockPool::holdForOtherProcesses(Block* block) {
  if (!leasedElsewhere(*block)) {
    block->shared = false;
    return false;
  }
  const auto lock = lockBriefly(mutex_);
  heldForOtherProcesses_.push_back(block);
  heldCount_.store(heldForOtherProcesses_.size(), std::memory_order_relaxed);
  return true;
}

size_t BlockPool::collectShared() {
  const auto lock = lockBriefly(mutex_);
  collectSharedLocked();
  return heldForOtherProcesses_.size();
}

void BlockPool::collectSharedLocked() {
  lastSharedCollection_.store(nowNanoseconds(), std::memory_order_relaxed);
  if (heldForOtherProcesses_.empty()) return;
  auto firstReleased =
      std::stable_partition(heldForOtherProcesses_.begin(), heldForOtherProcesses_.end(),
                            [](const Block* block) { return leasedElsewhere(*block); });
  std::vector<Block*> released(firstReleased, heldForOtherProcesses_.end());
  heldForOtherProcesses_.erase(firstReleased, heldForOtherProcesses_.end());
  heldCount_.store(heldForOtherProcesses_.size(), std::memory_order_relaxed);
  for (Block* block : released) {
    block->shared = false;
    freeLocked(block, nullptr);  // the ordinary free from here on
  }
}

bool BlockPool::sharedCollectionDue() {
  const int64_t now = nowNanoseconds();
  int64_t last = lastSharedCollection_.load(std::memory_order_relaxed);
  return now - last >= kCollectionPeriodNs &&
         lastSharedCollection_.compare_exchange_strong(last, now, std::memory_order_relaxed);
}

}  // namespace torch_openreg
