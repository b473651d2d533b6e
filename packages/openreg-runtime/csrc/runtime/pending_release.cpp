// pending_release.cpp — running releases once the work queued before them is done.
#include "pending_release.h"

#include <algorithm>
#include <utility>

namespace openreg::runtime {

bool PendingReleases::Entry::passed() const {
  return std::all_of(fences.begin(), fences.end(),
                     [](const Fence& fence) { return fence.passed(); });
}

void PendingReleases::releaseAfter(std::vector<Fence> fences, int device,
                                   std::function<void()> release) {
  Entry entry{std::move(fences), device, std::move(release)};
  if (entry.passed()) {
    entry.release();
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.push_back(std::move(entry));
  outstanding_.fetch_add(1);
}

void PendingReleases::releaseCompleted() {
  if (outstanding_.load() == 0) return;
  runReleasable();
}

void PendingReleases::runReleasable() {
  // Holding releasing_ while releases run makes a caller that finds an entry
  // already taken wait until its memory really is free.
  std::lock_guard<std::mutex> releasing(releasing_);
  std::vector<Entry> ready;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto firstReady = std::stable_partition(entries_.begin(), entries_.end(),
                                            [](const Entry& entry) { return !entry.passed(); });
    std::move(firstReady, entries_.end(), std::back_inserter(ready));
    entries_.erase(firstReady, entries_.end());
  }
  // Outside mutex_: a release takes the memory's own lock and punches holes.
  for (Entry& entry : ready) {
    entry.release();
    outstanding_.fetch_sub(1);
  }
}

bool PendingReleases::anyPendingFor(int device) {
  if (outstanding_.load() == 0) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  // Releases being run by another thread count (their device is not known).
  if (outstanding_.load() > entries_.size()) return true;
  return std::any_of(entries_.begin(), entries_.end(),
                     [device](const Entry& entry) { return entry.device == device; });
}

void PendingReleases::waitForDevice(int device) {
  std::vector<Fence> fences;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Entry& entry : entries_) {
      if (entry.device == device)
        fences.insert(fences.end(), entry.fences.begin(), entry.fences.end());
    }
  }
  for (const Fence& fence : fences) fence.stream->waitFor(fence.sequence);
  runReleasable();
}

PendingReleases& pendingReleases() {
  // Never destroyed: stream workers may complete work while the process exits.
  static auto* releases = new PendingReleases();
  return *releases;
}

void releaseCompletedFrees() { pendingReleases().releaseCompleted(); }

}  // namespace openreg::runtime
