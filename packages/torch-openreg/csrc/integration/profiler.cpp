// profiler.cpp — Kineto sessions over the engine's activity records, and the
// legacy profiler stubs.
//
// Kineto calls a child session's pushCorrelationId/popCorrelationId on the
// thread entering and leaving each operator; the session forwards them to
// the engine, which tags each launch with the innermost operator's id. At
// processTrace Kineto hands over a lookup from that id to the operator's CPU
// activity: kernels and launches are linked to it there, so nothing but an
// integer travels on the hot path while recording.
//
// PyTorch compiles its PrivateUse1 registry header only with USE_KINETO
// defined; torch 2.15's wheels are built with Kineto (the registry and
// libkineto symbols are exported by libtorch_cpu), so this file defines it
// for its own includes.
#include "integration/profiler.h"

#ifndef USE_KINETO
#define USE_KINETO
#endif

#include <Python.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <libkineto.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/device.h"
#include "base/device_activity.h"
#include "base/kernel_thread.h"
#include "base/runtime_check.h"
#include "integration/stream.h"

namespace torch_openreg {
namespace {

using libkineto::ActivityType;

// What openreg produces, among the activity types PyTorch asks for when
// ProfilerActivity.PrivateUse1 is requested.
const std::set<ActivityType>& producedActivities() {
  static const std::set<ActivityType> types{
      ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY, ActivityType::PRIVATEUSE1_RUNTIME};
  return types;
}

ActivityType deviceActivityType(ActivityKind kind) {
  return kind == ActivityKind::Memcpy ? ActivityType::GPU_MEMCPY : ActivityType::CONCURRENT_KERNEL;
}

std::string activityName(const DeviceActivity& record, const libkineto::ITraceActivity* op) {
  if (record.host) {
    switch (record.kind) {
      case ActivityKind::Memcpy:
        return "openregMemcpyAsync";
      case ActivityKind::Collective:
        return "openregLaunchCollective";
      case ActivityKind::Kernel:
        return "openregLaunchKernel";
    }
  }
  if (record.label != nullptr) return record.label;
  if (op != nullptr) return op->name();
  return record.kind == ActivityKind::Collective ? "orgloo collective" : "openreg kernel";
}

// A stream's lane id: unique across devices, as Kineto keys lanes by
// (device, resource) but labels them from resource ids alone.
int64_t laneOf(const DeviceActivity& record) {
  return static_cast<int64_t>(record.device) * 1000 + static_cast<int64_t>(record.stream);
}

class OpenRegSession final : public libkineto::IActivityProfilerSession {
 public:
  explicit OpenRegSession(std::set<ActivityType> types) : types_(std::move(types)) {}

  void start() override {
    startDeviceActivityRecording();
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    waitForUsedDevices();
    stopDeviceActivityRecording();
    records_ = takeDeviceActivities();
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) { return nullptr; }, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback operatorOf, int64_t startTime,
                    int64_t endTime) override {
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(startTime, endTime, "openreg");
    buffer_->gpuOpCount = 0;
    for (const DeviceActivity& record : records_) {
      const ActivityType type =
          record.host ? ActivityType::PRIVATEUSE1_RUNTIME : deviceActivityType(record.kind);
      if (types_.count(type) == 0) continue;
      const auto* op =
          record.correlation != 0 ? operatorOf(static_cast<int32_t>(record.correlation)) : nullptr;
      buffer_->emplace_activity(buffer_->span, type, activityName(record, op));
      auto& activity = libkineto::CpuTraceBuffer::toRef(buffer_->activities.back());
      fill(activity, record, op);
      if (!record.host) noteLane(record);
      activity.log(logger);
    }
    records_.clear();
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    if (lanes_.empty()) return nullptr;
    const c10::DeviceIndex device = lanes_.begin()->first.first;
    return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{
        device, device + kSortAfterProcesses, "openreg", "openreg " + std::to_string(device)});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> lanes;
    for (const auto& [key, lane] : lanes_) {
      const auto& [device, stream] = key;
      lanes.push_back(libkineto::ResourceInfo{
          lane, lane, device,
          "openreg:" + std::to_string(device) + " stream " + std::to_string(stream)});
    }
    return lanes;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::move(buffer_);
  }

  void pushCorrelationId(uint64_t id) override { pushLaunchCorrelation(id); }
  void popCorrelationId() override { popLaunchCorrelation(); }

 private:
  // Kineto sorts processes by this index; devices go below the host's rows.
  static constexpr int64_t kSortAfterProcesses = 0x1000000;

  static void waitForUsedDevices() {
    // Work launched while recording finishes before the trace is cut; a
    // failing kernel is still reported by the user's next synchronizing call.
    // Queued work may need the GIL (Python-defined operators): release it
    // while waiting, if this thread holds it.
    if (insideKernel()) return;
    PyThreadState* saved = nullptr;
    if (Py_IsInitialized() && PyGILState_Check()) saved = PyEval_SaveThread();
    for (c10::DeviceIndex device = 0; device < deviceCount(); ++device) {
      if (!deviceUsed(device)) continue;
      DeviceScope scope(device);
      succeeded(orDeviceSynchronize());
    }
    if (saved != nullptr) PyEval_RestoreThread(saved);
  }

  void fill(libkineto::GenericTraceActivity& activity, const DeviceActivity& record,
            const libkineto::ITraceActivity* op) {
    activity.startTime = record.start;
    activity.endTime = record.end;
    activity.id = static_cast<int32_t>(record.launch);
    activity.linked = op;
    activity.flow.id = static_cast<uint32_t>(record.launch);
    activity.flow.type = libkineto::kLinkAsyncCpuGpu;
    activity.flow.start = record.host;
    if (record.host) {
      activity.device = static_cast<int32_t>(::getpid());
      activity.resource = record.hostThread;
      activity.threadId = static_cast<int32_t>(record.hostThread);
    } else {
      activity.device = record.device;
      activity.resource = laneOf(record);
      activity.addTypedMetadata("device", static_cast<int64_t>(record.device));
      activity.addTypedMetadata("stream", static_cast<int64_t>(record.stream));
      ++buffer_->gpuOpCount;
    }
    if (op != nullptr) activity.addTypedMetadata("External id", op->correlationId());
    activity.addTypedMetadata("correlation", static_cast<int64_t>(record.launch));
  }

  void noteLane(const DeviceActivity& record) {
    lanes_.emplace(std::make_pair(record.device, record.stream), laneOf(record));
  }

  std::set<ActivityType> types_;
  std::vector<DeviceActivity> records_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
  std::map<std::pair<c10::DeviceIndex, c10::StreamId>, int64_t> lanes_;
};

class OpenRegActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }

  const std::set<ActivityType>& availableActivities() const override {
    return producedActivities();
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<ActivityType>& requested, const libkineto::Config& /*config*/) override {
    std::set<ActivityType> types;
    for (ActivityType type : requested) {
      if (producedActivities().count(type) != 0) types.insert(type);
    }
    // A CPU-only profile (no ProfilerActivity.PrivateUse1) asks for none of
    // them except the runtime type, which PyTorch lists among the CPU ones:
    // without device activities there is nothing to link launches to.
    if (types.count(ActivityType::CONCURRENT_KERNEL) == 0 &&
        types.count(ActivityType::GPU_MEMCPY) == 0) {
      return nullptr;
    }
    return std::make_unique<OpenRegSession>(std::move(types));
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*startMs*/, int64_t /*durationMs*/, const std::set<ActivityType>& requested,
      const libkineto::Config& config) override {
    return configure(requested, config);
  }

 private:
  std::string name_{"openreg"};
};

// ---- Legacy path (use_device="openreg" without Kineto) ------------------------
// Each operator records a timing event on the current stream at its start and
// at its end; elapsed() is the device time between the two (microseconds, as
// PyTorch's stubs return). Operators run by a kernel on a worker are part of
// that kernel's time already: they record no event.
void destroyEvent(void* event) { orEventDestroy(static_cast<orEvent_t>(event)); }

class OpenRegProfilerStubs final : public torch::profiler::impl::ProfilerStubs {
 public:
  void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpuNanoseconds) const override {
    const c10::DeviceIndex current = insideKernel() ? 0 : currentDevice();
    if (device != nullptr) *device = current;
    if (event != nullptr && !insideKernel()) *event = recordedEvent(current);
    if (cpuNanoseconds != nullptr) *cpuNanoseconds = c10::getTime();
  }

  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* start,
                const torch::profiler::impl::ProfilerVoidEventStub* end) const override {
    if (start == nullptr || end == nullptr || *start == nullptr || *end == nullptr) return 0.0f;
    auto* first = static_cast<orEvent_t>(start->get());
    auto* second = static_cast<orEvent_t>(end->get());
    float milliseconds = 0.0f;
    if (!succeeded(orEventSynchronize(first)) || !succeeded(orEventSynchronize(second)) ||
        !succeeded(orEventElapsedTime(&milliseconds, first, second))) {
      return 0.0f;
    }
    return milliseconds * 1000.0f;
  }

  // Annotations (NVTX's role on CUDA) have no consumer on openreg: no
  // external tool reads ranges or marks from the runtime.
  void mark(const char* /*name*/) const override {}
  void rangePush(const char* /*name*/) const override {}
  void rangePop() const override {}

  bool enabled() const override { return true; }

  void onEachDevice(std::function<void(int)> op) const override {
    for (c10::DeviceIndex device = 0; device < deviceCount(); ++device) {
      DeviceScope scope(device);
      op(device);
    }
  }

  void synchronize() const override {
    if (!insideKernel()) OPENREG_CHECK(orDeviceSynchronize());
  }

 private:
  static torch::profiler::impl::ProfilerVoidEventStub recordedEvent(c10::DeviceIndex device) {
    orEvent_t event = nullptr;
    OPENREG_CHECK(orEventCreate(&event));
    torch::profiler::impl::ProfilerVoidEventStub owned(event, &destroyEvent);
    OPENREG_CHECK(orEventRecord(event, nativeHandle(currentStream(device))));
    return owned;
  }
};

const bool profilerHooksRegistered = [] {
  torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().registerFactory(
      [] { return std::make_unique<OpenRegActivityProfiler>(); });
  static OpenRegProfilerStubs stubs;
  torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  return true;
}();

}  // namespace

bool profilerRegistered() { return profilerHooksRegistered; }

}  // namespace torch_openreg
