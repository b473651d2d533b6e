// work.cpp — see work.h.
#include "distributed/work.h"

#include <c10/util/Exception.h>

#include <thread>
#include <utility>

#include "base/debug_modes.h"
#include "base/gil.h"
#include "base/python_exit.h"
#include "base/runtime_check.h"
#include "engine/kernel_launch.h"

namespace torch_openreg {
namespace {

// Small collectives finish within microseconds of being issued: a short spin
// (yielding between rounds, as the runtime's own waits do) saves the stream
// worker a sleep and a wake-up for them.
constexpr auto kJoinSpin = std::chrono::microseconds(50);

}  // namespace

OpenRegWork::OpenRegWork(int rank, c10d::OpType type, std::string description,
                         c10::DeviceIndex device, std::vector<at::Tensor> outputs,
                         std::vector<at::Tensor> held, bool blocksHost)
    : c10d::Work(rank, type),
      description_(std::move(description)),
      device_(device),
      outputs_(std::move(outputs)),
      held_(std::move(held)),
      blocksHost_(blocksHost),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors())) {}

OpenRegWork::~OpenRegWork() {
  notifyStreamOrder(&StreamOrderObserver::eventDestroyed, this);
  if (issuePoint_ != nullptr) orEventDestroy(issuePoint_);
}

// As on CUDA: the caller's current stream waits for the collective; the host
// only blocks for a barrier. A failure already known is raised here.
bool OpenRegWork::wait(std::chrono::milliseconds timeout) {
  demandIssue();
  if (blocksHost_) return waitOnHost(timeout);
  rethrowFailure();
  joinCurrentStream();
  return true;
}

void OpenRegWork::synchronize() {
  demandIssue();
  joinCurrentStream();
}

void OpenRegWork::blockCurrentStream() {
  demandIssue();
  joinCurrentStream();
}

c10::intrusive_ptr<c10::ivalue::Future> OpenRegWork::getFuture() {
  demandIssue();
  return future_;
}

int OpenRegWork::sourceRank() const {
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(completed_ && sourceRank_ >= 0,
              "sourceRank() is known only once a receive from any source has completed; "
              "call wait() first");
  return sourceRank_;
}

void OpenRegWork::finishWith(std::exception_ptr failure, int sourceRank) {
  std::vector<at::Tensor> released;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sourceRank_ = sourceRank;
    released.swap(held_);
  }
  letGo(released);  // Gloo is done with the memory: the host may reuse it
  finish(std::move(failure));
  done_.store(true, std::memory_order_release);
}

void OpenRegWork::completeFuture() {
  whilePythonRuns([this] {
    const std::exception_ptr failure = exception();
    if (failure) {
      future_->setError(failure);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  });
}

void OpenRegWork::rethrowFailure() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (exception_) std::rethrow_exception(exception_);
}

bool OpenRegWork::waitOnHost(std::chrono::milliseconds timeout) {
  {
    GilReleasedIfHeld released;  // Gloo threads may run Python future callbacks
    std::unique_lock<std::mutex> lock(mutex_);
    const auto done = [&] { return completed_; };
    if (timeout == kNoTimeout) {
      cv_.wait(lock, done);
    } else if (!cv_.wait_for(lock, timeout, done)) {
      C10_THROW_ERROR(DistBackendError, description_ + " did not complete within " +
                                            std::to_string(timeout.count()) + " ms");
    }
  }
  rethrowFailure();
  notifyStreamOrder(&StreamOrderObserver::eventSynchronized, this);
  return true;
}

// Later work on the current stream runs after the collective; a failure
// becomes the stream's error, raised by its next synchronizing call. The race
// detector learns the order too (the collective was recorded as an event on
// the stream it was issued on, this Work its handle).
void OpenRegWork::joinCurrentStream() {
  LaunchSpec spec{LaunchContext::forDevice(device_), "orgloo wait"};
  spec.activity = ActivityKind::Collective;
  spec.activityLabel = "orgloo wait";
  spec.kernelEnvironment = false;
  notifyStreamOrder(&StreamOrderObserver::streamWaitedForEvent, spec.context.stream, this);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_ && !exception_) return;
  }
  auto self = c10::intrusive_ptr<OpenRegWork>::reclaim_copy(this);
  launchOnDevice(spec, [self] { self->waitOnWorker(); });
}

void OpenRegWork::waitOnWorker() {
  const auto deadline = std::chrono::steady_clock::now() + kJoinSpin;
  while (!done_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return completed_; });
  if (exception_) orSetKernelError(messageOf(exception_).c_str());
}

void OpenRegWork::demandIssue() const {
  if (issuePoint_ != nullptr) succeeded(orEventQuery(issuePoint_));
}

std::string messageOf(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const c10::Error& error) {
    return error.what_without_backtrace();
  } catch (const std::exception& error) {
    return error.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace torch_openreg
