// block_pool_streams.cpp — memory used on other streams (Tensor.record_stream).
//
// CUDA's contract: record_stream only remembers the stream; the events that
// protect the memory are recorded when the block is freed, so work queued on
// that stream after record_stream() but before the free is covered too (the
// prefetcher pattern records first and launches the work that uses the
// tensor afterwards). A freed block with recorded streams waits outside the
// pool until its events have completed; pending frees are collected at the
// next allocation, and waited for by empty_cache and the out-of-memory retry.
#include <c10/util/Exception.h>

#include <algorithm>
#include <iterator>

#include "base/brief_lock.h"
#include "base/device.h"
#include "base/gil.h"
#include "base/kernel_thread.h"
#include "base/runtime_check.h"
#include "memory/block_pool.h"

namespace torch_openreg {
namespace {

bool reached(orStream_t stream, orEvent_t event) {
  return event != nullptr ? succeeded(orEventQuery(event)) : succeeded(orStreamQuery(stream));
}

orError_t waitFor(orStream_t stream, orEvent_t event) {
  return event != nullptr ? orEventSynchronize(event) : orStreamSynchronize(stream);
}

}  // namespace

BlockPool::StreamMarks::~StreamMarks() {
  for (const auto& [stream, event] : marks) {
    if (event != nullptr) orEventDestroy(event);
  }
}

void BlockPool::recordStream(Block* block, orStream_t stream) {
  const auto lock = lockBriefly(mutex_);
  // Uses on the allocating stream are ordered with its reuse already.
  if (stream == block->stream) return;
  auto& uses = block->streamUses;
  if (std::find(uses.begin(), uses.end(), stream) == uses.end()) uses.push_back(stream);
}

void BlockPool::deferFree(Block* block) {
  auto marks = std::make_shared<StreamMarks>();
  for (orStream_t stream : block->streamUses)
    marks->marks.emplace_back(stream, recordEventOrNull(stream));
  pendingFrees_.push_back(PendingFree{block, std::move(marks)});
}

void BlockPool::collectPendingFrees() {
  auto done = [](const PendingFree& pending) {
    return std::all_of(pending.marks->marks.begin(), pending.marks->marks.end(),
                       [](const auto& mark) { return reached(mark.first, mark.second); });
  };
  auto firstDone =
      std::stable_partition(pendingFrees_.begin(), pendingFrees_.end(),
                            [&](const PendingFree& pending) { return !done(pending); });
  std::vector<PendingFree> finished(std::make_move_iterator(firstDone),
                                    std::make_move_iterator(pendingFrees_.end()));
  pendingFrees_.erase(firstDone, pendingFrees_.end());
  for (PendingFree& pending : finished) {
    pending.block->streamUses.clear();
    returnToPool(pending.block, nullptr);
  }
}

void BlockPool::waitForPendingFrees(std::unique_lock<std::mutex>& lock) {
  if (insideKernel() || pendingFrees_.empty()) return;
  std::vector<std::shared_ptr<StreamMarks>> waits;
  for (const PendingFree& pending : pendingFrees_) waits.push_back(pending.marks);
  lock.unlock();
  orError_t status = orSuccess;
  {
    GilReleasedIfHeld unlocked;  // queued work may need the GIL
    for (const auto& marks : waits) {
      for (const auto& [stream, event] : marks->marks) {
        const orError_t waited = waitFor(stream, event);
        if (status == orSuccess) status = waited;
      }
    }
  }
  lock.lock();
  collectPendingFrees();
  // A synchronizing call: a failure of the queued work is reported here.
  OPENREG_CHECK(status);
}

}  // namespace torch_openreg
