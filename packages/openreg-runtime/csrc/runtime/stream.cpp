// stream.cpp — worker thread, FIFO execution and completion tracking.
#include "stream.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "chaos.h"
#include "device_registry.h"
#include "errors.h"
#include "pending_release.h"

namespace openreg::runtime {
namespace {

// A host thread waiting for work polls this long before it sleeps; so does a
// worker that ran out of work after a host thread waited for it (the next
// launch of a launch-and-wait loop follows at once).
constexpr auto kSpinBudget = std::chrono::microseconds(50);
// A worker that ran out of work while the host streams launches polls this
// long before it dozes: of the order of what sleeping and being woken costs
// in CPU time here (docs/streams.md), so short gaps are polled through and
// long ones cost at most twice what they would ideally.
constexpr auto kWorkerSpinBudget = std::chrono::microseconds(10);

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls `ready` for up to kSpinBudget; true if it became true. Between
// rounds of polling the thread yields: on a machine with few cores, other
// runnable threads (the host, a kernel's OpenMP helpers) get the core instead
// of losing it to a spinning idle worker.
template <typename Ready>
bool spinUntil(Ready&& ready, std::chrono::microseconds budget = kSpinBudget) {
  const auto deadline = std::chrono::steady_clock::now() + budget;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      cpuRelax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return ready();
    std::this_thread::yield();
  }
}

// The stream's mutex guards a few pointer moves. A host thread enqueueing
// while the worker takes or completes work would otherwise sleep in the
// kernel for what lasts well under a microsecond; polling first avoids a
// futex wait and wake-up (tens of microseconds of CPU time on a small VM).
std::unique_lock<std::mutex> lockBriefly(std::mutex& mutex) {
  for (int poll = 0; poll < 200; ++poll) {
    if (mutex.try_lock()) return std::unique_lock<std::mutex>(mutex, std::adopt_lock);
    cpuRelax();
  }
  return std::unique_lock<std::mutex>(mutex);
}

std::atomic<uint64_t> streamsCreated{0};

// Set while a worker runs one piece of work; orSetKernelError writes here.
thread_local std::optional<std::string>* currentWorkFailure = nullptr;
// The stream whose worker this thread is (work may enqueue on its own stream
// and must never wait for the queue it is draining).
thread_local const Stream* workerOf = nullptr;
}  // namespace

bool reportFailureOfCurrentWork(const std::string& message) {
  if (currentWorkFailure == nullptr) return false;
  if (!currentWorkFailure->has_value()) *currentWorkFailure = message;
  return true;
}

bool insideStreamWork() { return workerOf != nullptr; }

const Stream* streamOfCurrentWork() { return workerOf; }

void refuseInsideStreamWork(const char* call) {
  check(!insideStreamWork(), orErrorNotPermitted, call,
        " cannot be called inside work running on an OpenReg stream: the work would wait for "
        "itself or for work queued behind it. Synchronize from host code, or order streams "
        "with events (orStreamWaitEvent)");
}

Stream::Stream(int device, int priority, unsigned flags, bool isDefault)
    : device_(device),
      priority_(priority),
      flags_(flags),
      isDefault_(isDefault),
      number_(streamsCreated.fetch_add(1, std::memory_order_relaxed)) {}

uint64_t Stream::enqueue(Work work) {
  std::unique_lock<std::mutex> lock = lockBriefly(mutex_);
  check(!closing_, orErrorInvalidResourceHandle, "the stream was destroyed");
  if (!workerStarted_) startWorkerLocked();
  if (queue_.size() >= kMaxQueued && workerOf != this) {
    waitForQueueSpaceLocked(lock);
    check(!closing_, orErrorInvalidResourceHandle, "the stream was destroyed while waiting");
  }
  const uint64_t sequence = enqueued_.load(std::memory_order_relaxed) + 1;
  if (chaos::enabled()) work = underChaos(std::move(work), sequence);
  queue_.push_back(std::move(work));
  enqueued_.store(sequence, std::memory_order_release);
  // Chaos scheduling orders work across streams: a dozing stream would hold
  // up every other stream's turn, so its launches always ring.
  const bool ring =
      workerState_ == WorkerState::Asleep ||
      (workerState_ == WorkerState::Dozing && (queue_.size() >= kRingAt || chaos::enabled()));
  if (ring) workerState_ = WorkerState::Running;
  lock.unlock();
  if (ring) workAvailable_.notify_one();
  return sequence;
}

void Stream::ring() {
  if (!parked_.load(std::memory_order_acquire)) return;
  std::unique_lock<std::mutex> lock(mutex_);
  if (workerState_ == WorkerState::Running || queue_.empty()) return;
  workerState_ = WorkerState::Running;
  lock.unlock();
  workAvailable_.notify_one();
}

void Stream::waitForQueueSpaceLocked(std::unique_lock<std::mutex>& lock) {
  // Hysteresis: resuming at the first free slot would cost a wake-up per
  // completed piece of work while the host stays a full queue ahead.
  ++queueSpaceWaiters_;
  if (chaos::enabled()) noteDemand(enqueued_.load(std::memory_order_relaxed));
  queueSpace_.wait(lock, [&] { return queue_.size() <= kResumeEnqueueAt || closing_; });
  --queueSpaceWaiters_;
}

void Stream::startWorkerLocked() {
  // The worker owns a reference, so a destroyed stream lives until its queue
  // drains; the thread is detached because nobody may block on destruction.
  std::thread([self = shared_from_this()] { self->workerLoop(); }).detach();
  workerStarted_ = true;
}

void Stream::workerLoop() {
  workerOf = this;
  // Busy time for openreg-smi and utilization() (device_registry.h), counted
  // per busy period rather than per piece of work: back-to-back work costs one
  // comparison, and only going busy or idle reads the clock.
  DeviceActivity& activity = deviceActivity(device_);
  bool busy = false;
  Work work;
  while (takeNext(work)) {
    if (!busy) activity.workStarted();
    runOne(work);
    busy = !idle();
    if (!busy) activity.workFinished();
  }
  if (busy) activity.workFinished();
}

bool Stream::takeNext(Work& work) {
  // Work is pending when more was enqueued than completed (the worker is the
  // only one completing, and it completes what it takes, in order).
  const auto pending = [&] {
    return enqueued_.load(std::memory_order_acquire) > completed_.load(std::memory_order_relaxed);
  };
  if (!pending()) {
    const bool waitedFor = waitedFor_.exchange(false, std::memory_order_relaxed);
    spinUntil(pending, waitedFor ? kSpinBudget : kWorkerSpinBudget);
  }
  std::unique_lock<std::mutex> lock = lockBriefly(mutex_);
  if (queue_.empty() && !closing_) parkLocked(lock);
  if (queue_.empty()) return false;  // closing and drained
  work = std::move(queue_.front());
  queue_.pop_front();
  if (queueSpaceWaiters_ > 0 && queue_.size() == kResumeEnqueueAt) queueSpace_.notify_all();
  return true;
}

// Out of work: doze until rung or kDozeTimeout has passed, and take what was
// queued meanwhile; if nothing was, sleep until the next launch rings.
void Stream::parkLocked(std::unique_lock<std::mutex>& lock) {
  const auto rung = [&] { return workerState_ == WorkerState::Running || closing_; };
  parked_.store(true, std::memory_order_release);
  workerState_ = WorkerState::Dozing;
  workAvailable_.wait_for(lock, kDozeTimeout, rung);
  if (queue_.empty() && !rung()) {
    workerState_ = WorkerState::Asleep;
    workAvailable_.wait(lock, rung);
  }
  workerState_ = WorkerState::Running;
  parked_.store(false, std::memory_order_release);
}

void Stream::runOne(Work& work) {
  std::optional<std::string> failure;
  currentWorkFailure = &failure;
  try {
    work();
  } catch (const std::exception& error) {
    failure = error.what();
  } catch (...) {
    failure = "unknown exception in work enqueued on an OpenReg stream";
  }
  currentWorkFailure = nullptr;
  work = nullptr;  // release captured state before signalling completion
  {
    const std::unique_lock<std::mutex> lock = lockBriefly(mutex_);
    if (failure && !failure_) failure_ = std::move(failure);
    completed_.store(completed_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    wakeCompletionWaitersLocked();
  }
  // Memory freed while this work was queued may now be released (one atomic
  // load when nothing is pending).
  releaseCompletedFrees();
}

void Stream::wakeCompletionWaitersLocked() {
  if (sleepingWaiters_ == 0 || completed_.load(std::memory_order_relaxed) < wakeAtSequence_) return;
  wakeAtSequence_ = UINT64_MAX;  // waiters still short of their sequence register it again
  workDone_.notify_all();
}

bool Stream::isComplete(uint64_t sequence) {
  return completed_.load(std::memory_order_acquire) >= sequence;
}

void Stream::noteDemand(uint64_t sequence) {
  uint64_t known = demanded_.load(std::memory_order_relaxed);
  while (known < sequence &&
         !demanded_.compare_exchange_weak(known, sequence, std::memory_order_relaxed)) {
  }
}

// Holds are polled rather than signalled: chaos scheduling is a debugging
// mode, and polling keeps the waiters' fast paths untouched.
void Stream::holdUntilWaited(std::chrono::milliseconds cap) {
  const uint64_t next = completed_.load(std::memory_order_relaxed) + 2;  // the work after this one
  chaos::settle(chaos::currentTicket());  // held work does not block later work
  const auto deadline = std::chrono::steady_clock::now() + cap;
  while (demanded_.load(std::memory_order_relaxed) < next) {
    if (std::chrono::steady_clock::now() >= deadline) return chaos::noteHoldEnded(true);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  chaos::noteHoldEnded(false);
}

// Work enqueued under chaos scheduling: it takes its turn in launch order,
// unless the seed holds it (then it settles at once and waits for a waiter).
//
// A held piece that is waited for runs after everything launched before the
// wait (it takes a new ticket then): what it should have preceded has run
// without it, deterministically.
Stream::Work Stream::underChaos(Work work, uint64_t sequence) {
  const uint64_t ticket = chaos::takeTicket(this);
  const bool held = chaos::decide(device_, number_, sequence).untilWaited;
  return [this, ticket, held, sequence, work = std::move(work)] {
    uint64_t turn = ticket;
    if (held) {
      chaos::settle(ticket);
      const auto deadline = std::chrono::steady_clock::now() + chaos::kRandomHoldCap;
      bool expired = false;
      while (!expired && demanded_.load(std::memory_order_relaxed) < sequence) {
        expired = std::chrono::steady_clock::now() >= deadline;
        if (!expired) std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      chaos::noteHoldEnded(expired);
      turn = chaos::takeTicket(this);
    }
    chaos::waitForTurn(turn, this);
    chaos::currentTicket() = turn;
    struct Settle {
      uint64_t ticket;
      ~Settle() {
        chaos::settle(ticket);
        chaos::currentTicket() = 0;
      }
    } settleAtEnd{turn};
    work();
  };
}

void Stream::waitFor(uint64_t sequence) {
  if (chaos::enabled()) {
    noteDemand(sequence);
    // Work waiting for other work (an event wait) must not hold up what it waits for.
    if (workerOf != nullptr) chaos::settle(chaos::currentTicket());
  }
  if (isComplete(sequence)) return;
  ring();
  waitedFor_.store(true, std::memory_order_relaxed);
  if (spinUntil([&] { return isComplete(sequence); })) return;
  std::unique_lock<std::mutex> lock(mutex_);
  ++sleepingWaiters_;
  while (!isComplete(sequence)) {
    wakeAtSequence_ = std::min(wakeAtSequence_, sequence);
    workDone_.wait(lock);
  }
  --sleepingWaiters_;
}

void Stream::synchronize() { waitFor(enqueued_.load(std::memory_order_acquire)); }

bool Stream::idle() {
  return completed_.load(std::memory_order_acquire) >= enqueued_.load(std::memory_order_acquire);
}

std::optional<std::string> Stream::takeFailure() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::optional<std::string> failure = std::move(failure_);
  failure_.reset();
  return failure;
}

void throwPendingFailure(Stream& stream) {
  if (auto failure = stream.takeFailure()) {
    fail(orErrorLaunchFailure, "work on an OpenReg stream of device ", stream.device(),
         " failed: ", *failure);
  }
}

void synchronizeOrThrow(Stream& stream) {
  stream.synchronize();
  throwPendingFailure(stream);
}

void Stream::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  closing_ = true;
  workAvailable_.notify_all();
  queueSpace_.notify_all();
}

}  // namespace openreg::runtime
