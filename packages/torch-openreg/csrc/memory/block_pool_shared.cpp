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
// first collection that finds no lease on it: at the next allocation of this
// pool, at empty_cache, or at torch.openreg.ipc_collect.
#include <algorithm>
#include <iterator>
#include <mutex>
#include <vector>

#include "base/runtime_check.h"
#include "memory/block_pool.h"

namespace torch_openreg {
namespace {

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

}  // namespace

void BlockPool::markShared(Block* block) {
  std::lock_guard<std::mutex> lock(mutex_);
  block->shared = true;
}

bool BlockPool::holdForOtherProcesses(Block* block) {
  if (!leasedElsewhere(*block)) {
    block->shared = false;
    return false;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  heldForOtherProcesses_.push_back(block);
  heldCount_.store(heldForOtherProcesses_.size(), std::memory_order_relaxed);
  return true;
}

size_t BlockPool::collectShared() {
  std::vector<Block*> released;
  size_t remaining = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto firstReleased =
        std::stable_partition(heldForOtherProcesses_.begin(), heldForOtherProcesses_.end(),
                              [](const Block* block) { return leasedElsewhere(*block); });
    released.assign(firstReleased, heldForOtherProcesses_.end());
    heldForOtherProcesses_.erase(firstReleased, heldForOtherProcesses_.end());
    remaining = heldForOtherProcesses_.size();
    heldCount_.store(remaining, std::memory_order_relaxed);
  }
  // The ordinary free, outside the lock (it takes it).
  for (Block* block : released) {
    block->shared = false;
    free(block);
  }
  return remaining;
}

}  // namespace torch_openreg
