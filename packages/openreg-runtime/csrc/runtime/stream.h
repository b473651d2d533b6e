// stream.h — a stream: a FIFO of work executed by its own worker thread.
//
// Work is numbered as it is enqueued; the worker counts what it completed.
// "Has work N finished?" is then one comparison, which is all events,
// queries and synchronization need. A failing piece of work leaves a message
// on the stream that the next synchronizing call reports (and clears).
//
// Hand-offs spin briefly before sleeping (worker waiting for work, caller
// waiting for completion): a condition-variable wake-up costs ~60 µs on a
// small VM, far more than most kernels, so short waits never reach the kernel.
// For the same reason a sleeping thread is woken once, when what it waits for
// has happened, not at every completion: the worker knows the earliest
// sequence a caller sleeps on, and a host thread held back by a full queue
// sleeps until the queue has drained to half.
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
  // A host thread that found the queue full resumes when it is this short.
  static constexpr size_t kResumeEnqueueAt = kMaxQueued / 2;
  bool isComplete(uint64_t sequence);
  // Sequence number of the most recently enqueued work (0: none yet).
  uint64_t lastEnqueued() const { return enqueued_.load(std::memory_order_acquire); }
  // Number of pieces of work completed (they complete in sequence order).
  uint64_t completed() const { return completed_.load(std::memory_order_acquire); }
  void waitFor(uint64_t sequence);
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
  bool workerSleeping_ = false;
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
