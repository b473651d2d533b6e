// kernel_launch.cpp — stream launch, the checks every launch gets, the
// kernel's thread state, error transport.
#include "engine/kernel_launch.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/debug_modes.h"
#include "base/device.h"
#include "base/device_activity.h"
#include "base/environment.h"
#include "base/gil.h"
#include "base/kernel_thread.h"
#include "base/runtime_check.h"
#include "base/sync_debug.h"
#include "engine/fallback_arguments.h"
#include "engine/graph_capture.h"
#include "engine/kernel_allocator.h"
#include "engine/race_detector.h"
#include "integration/stream.h"
#include "memory/block_pool.h"

namespace torch_openreg {
namespace {

// Warnings raised by kernels on a worker. A synchronous kernel's warnings
// are re-issued on the caller after it has waited (so Python sees them);
// an asynchronous kernel's are dropped: its signature ran synchronously
// before (see plan.h), where they were reported already.
class WorkerWarnings final : public c10::WarningHandler {
 public:
  explicit WorkerWarnings(bool keep) : keep_(keep) {}
  void process(const c10::Warning& warning) override {
    if (keep_) kept_.push_back(warning);
  }
  void reissue() const {
    for (const c10::Warning& warning : kept_) c10::warn(warning);
  }

 private:
  bool keep_;
  std::vector<c10::Warning> kept_;
};

// What every piece of kernel work does around its body, on the worker:
// allocations from the device, the launching stream as the worker's current
// stream (so allocations are tagged with it), the warning handler, and the
// thread state a kernel runs in. That state is fixed, not the caller's: a
// kernel is an operator already dispatched past autograd, Python modes and
// autocast, so the operators it calls internally run below autograd with
// gradients off, on CPU aliases — the caller's modes (a TorchDispatchMode,
// CPU autocast, vmap levels) must not apply to them again. Not carrying the
// caller's at::ThreadLocalState also keeps its capture off the host's hot
// path and its restore off the worker's. The one exception is inference
// mode: tensors a synchronous kernel creates become the caller's results,
// and a TensorImpl is an inference tensor if it is made in inference mode.
class KernelScope {
 public:
  KernelScope(const c10::Stream& stream, bool inferenceMode, WorkerWarnings* warnings)
      : inference_(inferenceMode),
        allocations_(stream.device_index()),
        previousStream_(exchangeStream(stream)),
        warnings_(warnings),
        kernelThread_(nativeHandle(stream)) {}
  ~KernelScope() { exchangeStream(previousStream_); }
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;

 private:
  c10::InferenceMode inference_;
  at::AutoDispatchBelowADInplaceOrView belowAutograd_;
  c10::AutoGradMode noGrad_{false};
  KernelAllocationScope allocations_;
  c10::Stream previousStream_;
  c10::WarningUtils::WarningHandlerGuard warnings_;
  KernelThreadScope kernelThread_;
};

// ---- The checks every launch gets ------------------------------------------------

// The race detector's view of one launch: the tensors it touches, checked
// before the work is queued, and told when the work has run.
class RaceCheck {
 public:
  explicit RaceCheck(const LaunchSpec& spec) {
    if (!debugModeOn(kDebugRaces) || insideKernel()) return;
    if (spec.arguments.empty()) {
      completion_ = checkLaunch(spec.operation.str(), spec.context.stream, spec.reads, spec.writes);
      return;
    }
    std::vector<at::Tensor> reads(spec.reads.begin(), spec.reads.end());
    std::vector<at::Tensor> writes(spec.writes.begin(), spec.writes.end());
    listArgumentAccesses(spec, reads, writes);
    completion_ = checkLaunch(spec.operation.str(), spec.context.stream, reads, writes);
  }
  // For the work: marks the launch finished when the work has run.
  std::shared_ptr<LaunchCompletion> completion() const { return completion_; }

 private:
  // An operator's schema says what it does with its tensors: arguments it
  // mutates are written, other tensor arguments read.
  static void listArgumentAccesses(const LaunchSpec& spec, std::vector<at::Tensor>& reads,
                                   std::vector<at::Tensor>& writes) {
    const c10::FunctionSchema& schema = spec.operation.op()->schema();
    for (size_t i = 0; i < spec.arguments.size(); ++i) {
      const bool write = isMutable(schema.arguments()[i]);
      forEachTensor(spec.arguments[i],
                    [&](const at::Tensor& tensor) { (write ? writes : reads).push_back(tensor); });
    }
  }

  std::shared_ptr<LaunchCompletion> completion_;
};

// Work wrapped so the race detector learns when it has run (also when it
// failed: a failed kernel touches memory no more).
std::function<void()> reportingCompletion(std::function<void()> body,
                                          std::shared_ptr<LaunchCompletion> completion) {
  if (completion == nullptr) return body;
  return [body = std::move(body), completion = std::move(completion)] {
    struct MarkOnExit {
      LaunchCompletion& completion;
      ~MarkOnExit() { completion.markFinished(); }
    } mark{*completion};
    body();
  };
}

void beforeLaunch(const LaunchSpec& spec) {
  if (spec.synchronizes != nullptr) checkSynchronization(spec.synchronizes);
}

// ---- Asynchronous launches ----------------------------------------------------
// A launch's state is allocated by the host thread. It is also freed there:
// the worker only hands finished launches back (a lock-free list) and the
// next launch from the host reclaims them. Freeing on the worker made glibc's
// allocator bounce its arena lock between the two threads on every operation
// (measured: ~13% of host samples in _int_malloc, ~22% in futex waits).
//
// An error inside asynchronous work surfaces at the next synchronization (or,
// if nothing synchronizes, at exit), far from the call that queued it, and a
// kernel's own message ("index out of range in self") does not say which
// operator failed: the launch's name is added to it. The error keeps its type.
struct Launch {
  std::function<void()> body;
  c10::Stream stream;
  bool inferenceMode;
  bool kernelEnvironment;
  std::unique_ptr<DeviceActivity> activity;  // null unless the profiler records
  OperationName operation;
  std::string operationText;  // a copy of a name the launch site owned
  Launch* next = nullptr;

  std::string name() const { return operation.borrowsText() ? operationText : operation.str(); }
};

std::atomic<Launch*> finishedLaunches{nullptr};

void retire(Launch* launch) {
  launch->next = finishedLaunches.load(std::memory_order_relaxed);
  while (!finishedLaunches.compare_exchange_weak(launch->next, launch, std::memory_order_release,
                                                 std::memory_order_relaxed)) {
  }
}

void reclaimFinishedLaunches() {
  Launch* launch = finishedLaunches.exchange(nullptr, std::memory_order_acquire);
  while (launch != nullptr) {
    Launch* next = launch->next;
    delete launch;
    launch = next;
  }
}

void runLaunch(void* data) {
  auto* launch = static_cast<Launch*>(data);
  {
    WorkerWarnings dropped(false);
    std::optional<KernelScope> scope;
    if (launch->kernelEnvironment) scope.emplace(launch->stream, launch->inferenceMode, &dropped);
    DeviceActivityTiming timing(launch->activity);
    try {
      launch->body();
    } catch (c10::Error& error) {
      error.add_context("in " + launch->name());
      // Without the C++ backtrace: the message is what users need to see.
      orSetKernelError(error.what_without_backtrace());
    } catch (const std::exception& error) {
      orSetKernelError(error.what());
    }
  }
  retire(launch);
}

}  // namespace

bool launchBlocking() {
  static const bool blocking =
      environmentChoice("OPENREG_LAUNCH_BLOCKING", {"0", "1"}, "0",
                        "'1' runs every kernel synchronously, so an error is raised by the "
                        "operator that caused it, like CUDA_LAUNCH_BLOCKING") == "1";
  return blocking;
}

void launchOnDevice(const LaunchSpec& spec, std::function<void()> body) {
  const LaunchContext& context = spec.context;
  if (insideKernel()) {  // a kernel calling another openreg op: already on a worker
    KernelAllocationScope allocations(context.device);
    body();
    return;
  }
  if (capturedInstead(spec, body)) return;  // its stream captures a graph: recorded, not run
  if (launchBlocking()) {
    // Asked for as asynchronous work: its error names the launch as a queued
    // one's would, and keeps its type (the CPU kernel's IndexError, say).
    return runOnDevice(spec, [&] {
      try {
        body();
      } catch (c10::Error& error) {
        error.add_context("in " + spec.operation.str());
        throw;
      }
    });
  }
  beforeLaunch(spec);
  const RaceCheck races(spec);
  reclaimFinishedLaunches();
  DeviceActivityKindScope profiledAs(spec.activity, spec.activityLabel);
  LaunchRecording recording(context.stream);
  auto* launch = new Launch{reportingCompletion(std::move(body), races.completion()),
                            context.stream,
                            c10::InferenceMode::is_enabled(),
                            spec.kernelEnvironment,
                            recording.take(),
                            spec.operation,
                            spec.operation.borrowsText() ? spec.operation.str() : std::string()};
  const orError_t status = orLaunchHostFunc(context.handle, &runLaunch, launch);
  if (status != orSuccess) delete launch;
  OPENREG_CHECK(status);
}

void runOnDevice(const LaunchSpec& spec, const std::function<void()>& body) {
  const LaunchContext& context = spec.context;
  if (insideKernel()) {
    KernelAllocationScope allocations(context.device);
    body();
    return;
  }
  checkSynchronousLaunch(spec);  // a capture cannot wait for work
  beforeLaunch(spec);
  const RaceCheck races(spec);
  const c10::Stream& stream = context.stream;
  const bool inferenceMode = c10::InferenceMode::is_enabled();
  std::exception_ptr failure;
  WorkerWarnings warnings(true);
  // The caller's use_mem_pool routes: what the kernel allocates becomes the
  // caller's results, so it comes from the pool the caller allocates from.
  PoolRoutes routes = currentPoolRoutes();
  std::optional<DeviceActivityKindScope> profiledAs(std::in_place, spec.activity,
                                                    spec.activityLabel);
  std::optional<LaunchRecording> recording(std::in_place, stream);
  auto activity = recording->take();
  auto work = [&] {
    PoolRoutesScope callerRoutes(std::move(routes));
    std::optional<KernelScope> scope;
    if (spec.kernelEnvironment) scope.emplace(stream, inferenceMode, &warnings);
    DeviceActivityTiming timing(activity);
    try {
      body();
    } catch (...) {
      failure = std::current_exception();
    }
  };
  orStream_t handle = context.handle;
  OPENREG_CHECK(openreg::launchHostFunc(handle, work));
  recording.reset();  // the launch ends here; the wait is not part of it
  profiledAs.reset();
  orError_t waited = orSuccess;
  {
    GilReleasedIfHeld unlocked;  // queued work may need it (Python-defined operators)
    waited = orStreamSynchronize(handle);
  }
  if (races.completion() != nullptr) races.completion()->markFinished();
  OPENREG_CHECK(waited);
  if (spec.hostWaits && debugModeOn(kDebugRaces)) hostWaitedFor(stream);
  reclaimFinishedLaunches();
  warnings.reissue();
  if (failure) std::rethrow_exception(failure);
}

void copyOnStream(const LaunchSpec& spec, void* destination, const void* source, size_t bytes,
                  orMemcpyKind kind, std::function<void()> afterCopy) {
  const LaunchContext& context = spec.context;
  if (capturedCopyInstead(spec, destination, source, bytes, kind, afterCopy)) return;
  beforeLaunch(spec);
  const RaceCheck races(spec);
  DeviceActivityKindScope profiledAs(spec.activity, spec.activityLabel);
  LaunchRecording recording(context.stream);
  auto activity = recording.takeShared();
  // Under the profiler the copy is timed by work around it on the worker.
  auto timing = std::make_shared<std::unique_ptr<DeviceActivityTiming>>();
  if (activity != nullptr) {
    OPENREG_CHECK(openreg::launchHostFunc(context.handle, [activity, timing] {
      *timing = std::make_unique<DeviceActivityTiming>(activity);
    }));
  }
  std::shared_ptr<LaunchCompletion> completion = races.completion();
  orError_t copied = orSuccess;
  {
    GilReleasedIfHeld unlocked;  // a copy from or into pageable memory waits for the stream
    copied = orMemcpyAsync(destination, source, bytes, kind, context.handle);
  }
  if (copied != orSuccess && completion != nullptr) completion->markFinished();  // nothing queued
  OPENREG_CHECK(copied);
  if (afterCopy != nullptr || completion != nullptr || activity != nullptr) {
    OPENREG_CHECK(openreg::launchHostFunc(
        context.handle, [afterCopy = std::move(afterCopy), completion, timing]() mutable {
          timing->reset();
          if (completion != nullptr) completion->markFinished();
          if (afterCopy != nullptr) afterCopy();
          afterCopy = nullptr;  // what it holds is released here, on the worker
        }));
  }
  if (!spec.hostWaits && !launchBlocking()) return;
  orError_t waited = orSuccess;
  {
    GilReleasedIfHeld unlocked;
    waited = orStreamSynchronize(context.handle);
  }
  OPENREG_CHECK(waited);
  if (spec.hostWaits && debugModeOn(kDebugRaces)) hostWaitedFor(context.stream);
}

void recordLaunchResults(const LaunchSpec& spec, c10::ArrayRef<at::Tensor> results) {
  if (debugModeOn(kDebugRaces)) recordResults(spec.operation.str(), spec.context.stream, results);
}

std::string OperationName::str() const {
  if (literal_ != nullptr) return literal_;
  if (text_ != nullptr) return *text_;
  if (op_ != nullptr) return c10::toString(op_->operator_name());
  return "openreg work";
}

void streamWaitsFor(const c10::Stream& waiter, const c10::Stream& producer) {
  if (waiter == producer) return;
  checkCrossDeviceOrdering(waiter, producer);
  orEvent_t event = nullptr;
  {
    DeviceScope scope(producer.device_index());
    OPENREG_CHECK(orEventCreateWithFlags(&event, orEventDisableTiming));
  }
  // The wait holds the recorded point itself, so the event can go at once.
  const orError_t recorded = orEventRecord(event, nativeHandle(producer));
  const orError_t waited =
      recorded == orSuccess ? orStreamWaitEvent(nativeHandle(waiter), event, 0) : recorded;
  orEventDestroy(event);
  OPENREG_CHECK(waited);
  if (debugModeOn(kDebugRaces)) streamWaitedFor(waiter, producer);
}

}  // namespace torch_openreg
