// pending_release.h — memory freed while queued work may still use it.
//
// orFree and orFreeHost return at once and release stream-ordered: the memory
// is handed out again (or returned to the system) only once every piece of
// work queued before the free, on any stream of any device, has completed.
// The alternative, CUDA's synchronizing cudaFree, was rejected: the last
// reference to memory is often dropped inside stream work (the Python
// bindings' buffers are kept alive by a no-op queued behind their copies), and
// a free that waits there waits for its own stream forever. Measurements and
// the trade-offs: docs/memory-model.md, "Freeing memory that queued work uses".
//
// A free snapshots a fence per stream with unfinished work: (stream, last
// enqueued sequence). Completed releases run at the first of: a worker
// finishing a piece of work, a synchronizing call, orMemGetInfo, or an
// allocation, which waits for a device's pending releases before it reports
// out-of-memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "stream.h"

namespace openreg::runtime {

struct Fence {
  std::shared_ptr<Stream> stream;
  uint64_t sequence;
  bool passed() const { return stream->isComplete(sequence); }
};

class PendingReleases {
 public:
  static constexpr int kHostMemory = -1;

  // Runs `release` now if `fences` are all passed (or empty), otherwise once
  // they are. `device` is the owning device, or kHostMemory.
  void releaseAfter(std::vector<Fence> fences, int device, std::function<void()> release);
  // Runs every release whose fences have passed, and waits for releases
  // another thread is running: afterwards, the memory of every free whose
  // work has completed is free. One atomic load when none is outstanding.
  void releaseCompleted();
  // Whether releases of `device`'s memory are waiting for queued work (or
  // releases of any device are being run by another thread).
  bool anyPendingFor(int device);
  // Waits for the work that `device`'s pending releases wait for, then runs
  // them. Must not be called inside stream work (it may wait for its own stream).
  void waitForDevice(int device);

 private:
  struct Entry {
    std::vector<Fence> fences;
    int device;
    std::function<void()> release;
    bool passed() const;
  };

  void runReleasable();

  std::mutex mutex_;             // guards entries_
  std::mutex releasing_;         // held while releases run
  std::vector<Entry> entries_;
  std::atomic<size_t> outstanding_{0};  // entries not yet released, including running ones
};

PendingReleases& pendingReleases();
// Shorthand for pendingReleases().releaseCompleted(), used by stream workers.
void releaseCompletedFrees();

}  // namespace openreg::runtime
