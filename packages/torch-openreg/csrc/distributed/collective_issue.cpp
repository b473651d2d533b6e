// collective_issue.cpp — see collective_issue.h.
#include "distributed/collective_issue.h"

#include <c10/util/Exception.h>

#include <utility>

#include "base/debug_modes.h"
#include "base/device.h"
#include "base/python_exit.h"
#include "base/runtime_check.h"
#include "distributed/process_group.h"
#include "engine/kernel_launch.h"
#include "integration/stream.h"

namespace torch_openreg {
namespace {

// Set while a stream worker hands a collective to Gloo: a completion seen
// there must not run user callbacks (they may need the GIL, which a stream
// worker must never wait for).
thread_local bool onStreamWorker = false;

// The future of a Gloo work, or null: Gloo's send/recv works and some of its
// composite collectives (reduce_scatter_tensor) have none and complete only
// inside their wait().
c10::intrusive_ptr<c10::ivalue::Future> futureOf(c10d::Work& work) {
  try {
    return work.getFuture();
  } catch (const c10::Error&) {
    return nullptr;
  }
}

std::exception_ptr distError(const std::string& message) {
  return std::make_exception_ptr(
      c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, message));
}

// An event recorded on `stream` now (null if the runtime refuses one).
orEvent_t eventAfterLastWork(const c10::Stream& stream) {
  DeviceScope scope(stream.device_index());
  orEvent_t event = nullptr;
  if (!succeeded(orEventCreateWithFlags(&event, orEventDisableTiming))) return nullptr;
  if (succeeded(orEventRecord(event, nativeHandle(stream)))) return event;
  orEventDestroy(event);
  return nullptr;
}

}  // namespace

CollectiveIssuer::CollectiveIssuer(int rank, int size, c10d::Backend* gloo)
    : rank_(rank), size_(size), gloo_(gloo) {}

std::string CollectiveIssuer::prefix() const {
  return std::string(kProcessGroupBackendName) + " rank " + std::to_string(rank_) + " of " +
         std::to_string(size_) + ": ";
}

void CollectiveIssuer::throwIfBroken() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failure_) {
    C10_THROW_ERROR(DistBackendError,
                    prefix() + "the process group is unusable after an earlier failure (" +
                        messageOf(failure_) +
                        "); destroy it and create a new one once every rank is back");
  }
}

bool CollectiveIssuer::broken() {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<bool>(failure_);
}

std::vector<c10::intrusive_ptr<c10d::Work>> CollectiveIssuer::detachGloo() {
  std::vector<c10::intrusive_ptr<c10d::Work>> pending;
  std::lock_guard<std::mutex> lock(mutex_);
  gloo_ = nullptr;
  for (c10d::Work* work : waitedOn_) {
    pending.push_back(c10::intrusive_ptr<c10d::Work>::reclaim_copy(work));
  }
  return pending;
}

void CollectiveIssuer::issue(const LaunchSpec& spec, const c10::intrusive_ptr<OpenRegWork>& work,
                             GlooCall call) {
  auto self = shared_from_this();
  std::lock_guard<std::mutex> order(hostOrder_);
  const uint64_t ticket = nextTicket_++;
  try {
    launchOnDevice(spec, [self, work, call = std::move(call), ticket] {
      self->issueInTurn(ticket, work, call);
    });
  } catch (...) {
    --nextTicket_;  // nobody waits for it: no later ticket exists yet
    throw;
  }
  // The Work is the collective's handle, as an event recorded right after it:
  // waiting for it orders the waiter after the collective (race detection).
  notifyStreamOrder(&StreamOrderObserver::eventRecorded, work.get(), spec.context.stream);
  if (debugModeOn(kDebugChaos)) work->setIssuePoint(eventAfterLastWork(spec.context.stream));
}

// On the stream worker: hand the collective to Gloo in ticket order.
void CollectiveIssuer::issueInTurn(uint64_t ticket, const c10::intrusive_ptr<OpenRegWork>& work,
                                   const GlooCall& call) {
  std::exception_ptr refused;
  c10::intrusive_ptr<c10d::Work> glooWork;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    turn_.wait(lock, [&] { return issued_ == ticket; });
    glooWork = callGloo(work, call, refused);
    ++issued_;
  }
  turn_.notify_all();
  onStreamWorker = true;
  if (!refused) {
    try {
      watch(work, glooWork);
    } catch (...) {
      refused = distError(prefix() + work->description() +
                          " failed: " + messageOf(std::current_exception()));
    }
  }
  if (refused) complete(work, refused);
  onStreamWorker = false;
}

// Under the mutex, in turn: a broken or destroyed group refuses the call; Gloo
// refusing the arguments fails only this collective.
c10::intrusive_ptr<c10d::Work> CollectiveIssuer::callGloo(
    const c10::intrusive_ptr<OpenRegWork>& work, const GlooCall& call,
    std::exception_ptr& refused) {
  if (failure_) {
    refused =
        distError(prefix() + work->description() +
                  " was not started: an earlier collective failed (" + messageOf(failure_) + ")");
  } else if (gloo_ == nullptr) {
    refused = distError(prefix() + work->description() +
                        " was not started: the process group was destroyed first");
  } else {
    try {
      return call(*gloo_);
    } catch (...) {
      refused = distError(prefix() + work->description() +
                          " failed: " + messageOf(std::current_exception()));
    }
  }
  return nullptr;
}

void CollectiveIssuer::watch(const c10::intrusive_ptr<OpenRegWork>& work,
                             const c10::intrusive_ptr<c10d::Work>& glooWork) {
  auto future = futureOf(*glooWork);
  if (!future) return waitOnHelper(work, glooWork);
  // The callback is destroyed on Gloo's thread after it has run, out of our
  // hands: the work it captured is let go of here, through the gate.
  auto self = shared_from_this();
  auto pending = std::make_shared<c10::intrusive_ptr<OpenRegWork>>(work);
  future->addCallback([self, pending](c10::ivalue::Future& done) {
    self->completeFromGloo(*pending, done.hasError() ? done.exception_ptr() : nullptr);
    letGo(*pending);
  });
}

void CollectiveIssuer::waitOnHelper(const c10::intrusive_ptr<OpenRegWork>& work,
                                    const c10::intrusive_ptr<c10d::Work>& glooWork) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    waitedOn_.insert(glooWork.get());
  }
  auto self = shared_from_this();
  helpers_.run([self, work, glooWork] {
    std::exception_ptr failure;
    try {
      glooWork->wait();
    } catch (...) {
      failure = std::current_exception();
    }
    int source = -1;
    if (!failure && work->retrieveOpType() == c10d::OpType::RECVANYSOURCE) {
      source = glooWork->sourceRank();
    }
    {
      std::lock_guard<std::mutex> lock(self->mutex_);
      self->waitedOn_.erase(glooWork.get());
    }
    self->completeFromGloo(work, failure, source);
  });
}

// A failure reported by Gloo while running a collective breaks the group.
void CollectiveIssuer::completeFromGloo(const c10::intrusive_ptr<OpenRegWork>& work,
                                        std::exception_ptr failure, int source) {
  if (failure) {
    failure = distError(prefix() + work->description() + " failed: " + messageOf(failure));
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_) failure_ = failure;
  }
  complete(work, failure, source);
}

void CollectiveIssuer::complete(const c10::intrusive_ptr<OpenRegWork>& work,
                                std::exception_ptr failure, int source) {
  work->finishWith(std::move(failure), source);
  if (onStreamWorker) {
    helpers_.run([work] { work->completeFuture(); });
  } else {
    work->completeFuture();
  }
}

}  // namespace torch_openreg
