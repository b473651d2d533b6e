// kernel_launch.cpp — stream launch, the kernel's thread state, error transport.
#include "engine/kernel_launch.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <exception>
#include <memory>
#include <optional>
#include <vector>

#include "base/debug_modes.h"
#include "base/device.h"
#include "base/device_activity.h"
#include "base/environment.h"
#include "base/gil.h"
#include "base/kernel_thread.h"
#include "base/runtime_check.h"
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
        warnings_(warnings) {}
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

// ---- Asynchronous launches ----------------------------------------------------
// A launch's state is allocated by the host thread. It is also freed there:
// the worker only hands finished launches back (a lock-free list) and the
// next launch from the host reclaims them. Freeing on the worker made glibc's
// allocator bounce its arena lock between the two threads on every operation
// (measured: ~13% of host samples in _int_malloc, ~22% in futex waits).
struct Launch {
  std::function<void()> body;
  c10::Stream stream;
  bool inferenceMode;
  std::unique_ptr<DeviceActivity> activity;  // null unless the profiler records
  Launch* next = nullptr;
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
    KernelScope scope(launch->stream, launch->inferenceMode, &dropped);
    DeviceActivityTiming timing(launch->activity);
    try {
      launch->body();
    } catch (const c10::Error& error) {
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

void launchOnDevice(const LaunchContext& context, std::function<void()> body) {
  if (insideKernel()) {  // a kernel calling another openreg op: already on a worker
    KernelAllocationScope allocations(context.device);
    body();
    return;
  }
  if (launchBlocking()) return runOnDevice(context, body);
  reclaimFinishedLaunches();
  LaunchRecording recording(context.stream);
  auto* launch = new Launch{std::move(body), context.stream, c10::InferenceMode::is_enabled(),
                            recording.take()};
  const orError_t status = orLaunchHostFunc(context.handle, &runLaunch, launch);
  if (status != orSuccess) delete launch;
  OPENREG_CHECK(status);
}

void launchOnDevice(c10::DeviceIndex device, std::function<void()> body) {
  launchOnDevice(LaunchContext::forDevice(device), std::move(body));
}

void runOnDevice(c10::DeviceIndex device, const std::function<void()>& body) {
  runOnDevice(LaunchContext::forDevice(device), body);
}

void runOnDevice(const LaunchContext& context, const std::function<void()>& body) {
  if (insideKernel()) {
    KernelAllocationScope allocations(context.device);
    body();
    return;
  }
  const c10::Stream& stream = context.stream;
  const bool inferenceMode = c10::InferenceMode::is_enabled();
  std::exception_ptr failure;
  WorkerWarnings warnings(true);
  // The caller's use_mem_pool routes: what the kernel allocates becomes the
  // caller's results, so it comes from the pool the caller allocates from.
  PoolRoutes routes = currentPoolRoutes();
  std::optional<LaunchRecording> recording(std::in_place, stream);
  auto activity = recording->take();
  auto work = [&] {
    PoolRoutesScope callerRoutes(std::move(routes));
    KernelScope scope(stream, inferenceMode, &warnings);
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
  {
    GilReleasedIfHeld unlocked;  // queued work may need it (Python-defined operators)
    OPENREG_CHECK(orStreamSynchronize(handle));
  }
  reclaimFinishedLaunches();
  warnings.reissue();
  if (failure) std::rethrow_exception(failure);
}

void streamWaitsFor(const c10::Stream& waiter, const c10::Stream& producer) {
  if (waiter == producer) return;
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
