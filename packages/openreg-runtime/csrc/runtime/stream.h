// stream.h — a stream: a FIFO of work executed by its own worker thread.
//
// Work is numbered as it is enqueued; the worker counts what it completed.
// "Has work N finished?" is then one comparison, which is all events,
// queries and synchronization need. A failing piece of work leaves a message
// on the stream that the next synchronizing call reports (and clears).
//
// Hand-offs are priced in CPU time: on a small VM, sleeping on a condition
// variable and being woken costs about 20 µs of CPU time across the two
// threads, while polling costs the time polled (figures: docs/streams.md).
// So a worker that runs out of work while the host streams launches polls
// for only about that long (kWorkerSpinBudget), then dozes, and the host wakes
// it once per batch of work, not once per launch: while the worker dozes, a
// launch rings it only when kRingAt pieces of work are queued, and a wait or
// a query of the stream's progress (synchronize, stream and event queries,
// another stream's wait) rings it at once; a doze ends by itself after
// kDozeTimeout, so queued work never waits longer than that for a caller.
// After a doze that found nothing to do, the worker sleeps until the next
// launch rings it. A waiting caller polls for up to 50 µs before it sleeps,
// and after work a caller waited for, the worker polls as long for the next
// launch (a launch-then-synchronize loop stays a sub-microsecond round trip).
// A sleeping waiter is woken once, when what it waits for has happened, not
// at every completion: the worker knows the earliest sequence a caller sleeps
// on, and a host thread held back by a full queue sleeps until the queue has
// drained to half.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace openreg::runtime {

class Stream : public std::enable_shared_from_this<Stream> {
 public:
  using Work = std::function<void()>;

  Stream(int device, int priority, unsigned flags, bool isDefault);
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Appends work; returns its sequence number (1-based). Like a GPU's launch
  // queue, the queue is bounded: a host thread enqueueing more than
  // kMaxQueued pieces of work waits for the worker to catch up.
  uint64_t enqueue(Work work);
  static constexpr size_t kMaxQueued = 1024;
  // A dozing worker is rung when this many pieces of work are queued...
  static constexpr size_t kRingAt = 8;
  // ...and wakes by itself after this long.
  static constexpr std::chrono::microseconds kDozeTimeout{200};
  // A host thread that found the queue full resumes when it is this short.
  static constexpr size_t kResumeEnqueueAt = kMaxQueued / 2;
  bool isComplete(uint64_t sequence);
  // Sequence number of the most recently enqueued work (0: none yet).
  uint64_t lastEnqueued() const { return enqueued_.load(std::memory_order_acquire); }
  // Number of pieces of work completed (they complete in sequence order).
  uint64_t completed() const { return completed_.load(std::memory_order_acquire); }
  void waitFor(uint64_t sequence);
  // Makes a dozing or sleeping worker start on queued work now: for callers
  // that look at the stream's progress (a wait rings by itself).
  void ring();
  // Waits for everything enqueued so far.
  void synchronize();
  bool idle();
  // Returns and clears the message of the first failed work, if any.
  std::optional<std::string> takeFailure();
  // Lets queued work finish, then stops the worker.
  void close();
  // Chaos scheduling (chaos.h): someone waits for work up to `sequence`
  // (synchronize, event wait or query), so held work up to it may run.
  void noteDemand(uint64_t sequence);
  // Inside this stream's work: waits until later work is waited for (or `cap`).
  void holdUntilWaited(std::chrono::milliseconds cap);

  int device() const { return device_; }
  int priority() const { return priority_; }
  unsigned flags() const { return flags_; }
  bool isDefault() const { return isDefault_; }

 private:
  void startWorkerLocked();
  void workerLoop();
  bool takeNext(Work& work);
  void parkLocked(std::unique_lock<std::mutex>& lock);
  void runOne(Work& work);
  void waitForQueueSpaceLocked(std::unique_lock<std::mutex>& lock);
  void wakeCompletionWaitersLocked();
  Work underChaos(Work work, uint64_t sequence);

  const int device_;
  const int priority_;
  const unsigned flags_;
  const bool isDefault_;

  std::mutex mutex_;
  std::condition_variable workAvailable_;
  std::condition_variable workDone_;   // completion waiters (waitFor)
  std::condition_variable queueSpace_;  // host threads held back by a full queue
  std::deque<Work> queue_;
  // Written under mutex_, read without it by spinning waiters.
  std::atomic<uint64_t> enqueued_{0};
  std::atomic<uint64_t> completed_{0};
  std::optional<std::string> failure_;
  bool workerStarted_ = false;
  // The worker out of work: dozing (it wakes by itself) or asleep (only a
  // ring wakes it). A ring sets Running before signalling, so one ring
  // signals once. Written under mutex_; `parked_` mirrors "not Running" for
  // ring()'s lock-free check.
  enum class WorkerState { Running, Dozing, Asleep };
  WorkerState workerState_ = WorkerState::Running;
  std::atomic<bool> parked_{false};
  // A host thread waited for this stream since the worker last ran out of
  // work: the next launch is likely to follow at once, so the worker polls.
  std::atomic<bool> waitedFor_{false};
  // Completion waiters asleep, and the smallest sequence one of them needs:
  // the worker wakes them when completed_ reaches it (each re-registers if
  // its own sequence is later).
  int sleepingWaiters_ = 0;
  uint64_t wakeAtSequence_ = UINT64_MAX;
  int queueSpaceWaiters_ = 0;
  bool closing_ = false;
  // Chaos scheduling: the stream's creation number (decisions are seeded per
  // stream) and the highest sequence anyone has waited for.
  const uint64_t number_;
  std::atomic<uint64_t> demanded_{0};
};

// Throws ApiError(orErrorLaunchFailure) carrying the stream's pending failure.
void throwPendingFailure(Stream& stream);
// synchronize() followed by throwPendingFailure().
void synchronizeOrThrow(Stream& stream);

// Inside work run by a worker: records a failure message for that work.
// Returns false when the calling thread is not running stream work.
bool reportFailureOfCurrentWork(const std::string& message);

// True on a stream's worker thread (that is, inside work the runtime runs).
bool insideStreamWork();
// The stream whose work the calling thread is running (null outside work).
const Stream* streamOfCurrentWork();
// Throws orErrorNotPermitted inside stream work: `call` would wait for work
// that can only run after the calling work (its own stream, or work queued
// behind it), so it could never return. CUDA forbids the same in callbacks.
void refuseInsideStreamWork(const char* call);

}  // namespace openreg::runtime
