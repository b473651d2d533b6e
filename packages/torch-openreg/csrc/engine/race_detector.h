// race_detector.h — OPENREG_DEBUG=races: accesses to device memory from
// streams that are not ordered with each other.
//
// The model is the classic vector clock. Every checked launch on a stream is
// one step of that stream's clock. A stream's clock also says, for every
// other stream, up to which step it has waited for it: recording an event
// copies the stream's clock into the event, waiting for the event (or
// wait_stream) merges it into the waiting stream's, and a host-side
// synchronization merges it into the host's clock, which every later launch
// inherits. Per allocation the detector keeps the recent accesses (stream,
// step, byte range, read or write, operator, Python stack of the launch). A
// new access that conflicts with one of them (at least one writes, the byte
// ranges overlap) whose step its own stream has not waited for is a race.
// Freed memory keeps the history of its accesses: when the allocator hands
// it out again, the new owner's accesses are checked against it, which is how
// a missing record_stream is found.
//
// The detector does not take the allocator's word that reused memory is idle.
// The launch path tells it when each checked launch's work has run
// (LaunchCompletion); when memory is handed out again, every earlier access
// to it that has not run yet is judged from that: inside a kernel (which runs
// behind it in no stream order of the user's), or on a stream declared with
// record_stream (which the allocator must wait for), it is reported at once;
// otherwise the new owner's first access must be ordered after it.
//
// Every function here is called only when race detection is on (the caller
// checks debugModeOn(kDebugRaces), one relaxed load). Launches are checked
// from host threads (kernels calling other operators from a worker are not
// checked again); memory is observed wherever the allocator hands it out.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>
#include <c10/util/ArrayRef.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace torch_openreg {

// Whether a checked launch's work has run, set by the launch path when it has
// (so memory it used may then be reused by anyone).
struct LaunchCompletion {
  std::atomic<bool> finished{false};
  void markFinished() { finished.store(true, std::memory_order_release); }
};

// One launch on `stream` named `operation` that reads `reads` and writes
// `writes` (undefined tensors and host tensors are ignored). Reports each
// race (a warning, or a c10::Error in error mode) before it is recorded.
// Inside a kernel it checks nothing and returns null.
std::shared_ptr<LaunchCompletion> checkLaunch(const std::string& operation,
                                              const c10::Stream& stream,
                                              c10::ArrayRef<at::Tensor> reads,
                                              c10::ArrayRef<at::Tensor> writes);
// Writes of the launch just checked on `stream` whose tensors were only known
// after it ran (the results of a synchronous kernel, which has finished).
void recordResults(const std::string& operation, const c10::Stream& stream,
                   c10::ArrayRef<at::Tensor> writes);
// The host has waited for everything queued so far on `stream` (a blocking
// copy, .item()): later launches are ordered after it.
void hostWaitedFor(const c10::Stream& stream);
// `waiter`'s later work is ordered after what is queued on `producer` now.
void streamWaitedFor(const c10::Stream& waiter, const c10::Stream& producer);

// Installs the detector as the stream-order observer (see debug_modes.h).
void installRaceDetector();

struct RaceStatistics {
  uint64_t reports = 0;
  uint64_t checkedLaunches = 0;
};
RaceStatistics raceStatistics();
// The text of the reports so far (at most the last 100), oldest first.
std::vector<std::string> raceReports();
void clearRaceReports();
// Forgets every clock and access history (for tests and when the mode is
// switched on from Python: accesses made while it was off are unknown).
void resetRaceDetector();

}  // namespace torch_openreg
