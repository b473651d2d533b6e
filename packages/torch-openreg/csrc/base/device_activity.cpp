// device_activity.cpp — the recorder's clock, correlation stacks and store.
//
// Records go into one mutex-guarded vector: it is touched only while a
// profiler session runs, once per launch and once per finished piece of
// work, so a lock-free structure would buy nothing measurable there and
// cost clarity. The clock is the system clock in nanoseconds since the Unix
// epoch, the one Kineto and PyTorch's profiler put their events on.
#include "base/device_activity.h"

#include <unistd.h>

#include <chrono>
#include <mutex>
#include <utility>

#include <sys/syscall.h>

namespace torch_openreg {
namespace detail {
std::atomic<bool> deviceActivityOn{false};
}  // namespace detail

namespace {

struct Store {
  std::mutex mutex;
  std::vector<DeviceActivity> records;
};

Store& store() {
  static auto* instance = new Store();  // never destroyed: workers may submit during exit
  return *instance;
}

std::atomic<uint64_t> nextLaunch{1};

thread_local std::vector<uint64_t> correlations;
thread_local ActivityKind scopedKind = ActivityKind::Kernel;
thread_local const char* scopedLabel = nullptr;

int64_t nowNanoseconds() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t systemThreadId() {
  thread_local const auto id = static_cast<int64_t>(::syscall(SYS_gettid));
  return id;
}

void submit(DeviceActivity&& record) {
  Store& records = store();
  std::lock_guard<std::mutex> lock(records.mutex);
  // A record finishing after the session stopped belongs to no trace.
  if (recordingDeviceActivity()) records.records.push_back(std::move(record));
}

}  // namespace

void startDeviceActivityRecording() {
  takeDeviceActivities();
  detail::deviceActivityOn.store(true, std::memory_order_relaxed);
}

void stopDeviceActivityRecording() {
  Store& records = store();
  std::lock_guard<std::mutex> lock(records.mutex);
  detail::deviceActivityOn.store(false, std::memory_order_relaxed);
}

std::vector<DeviceActivity> takeDeviceActivities() {
  Store& records = store();
  std::lock_guard<std::mutex> lock(records.mutex);
  return std::exchange(records.records, {});
}

void pushLaunchCorrelation(uint64_t correlation) { correlations.push_back(correlation); }

void popLaunchCorrelation() {
  // A session started inside an operator sees its end without its start.
  if (!correlations.empty()) correlations.pop_back();
}

DeviceActivityKindScope::DeviceActivityKindScope(ActivityKind kind, const char* label)
    : previousKind_(std::exchange(scopedKind, kind)),
      previousLabel_(std::exchange(scopedLabel, label)) {}

DeviceActivityKindScope::~DeviceActivityKindScope() {
  scopedKind = previousKind_;
  scopedLabel = previousLabel_;
}

LaunchRecording::LaunchRecording(const c10::Stream& stream) {
  if (!recordingDeviceActivity()) return;
  host_ = std::make_unique<DeviceActivity>();
  host_->kind = scopedKind;
  host_->label = scopedLabel;
  host_->device = stream.device_index();
  host_->stream = stream.id();
  host_->correlation = correlations.empty() ? 0 : correlations.back();
  host_->launch = nextLaunch.fetch_add(1, std::memory_order_relaxed);
  host_->hostThread = systemThreadId();
  host_->host = true;
  work_ = std::make_unique<DeviceActivity>(*host_);
  work_->host = false;
  host_->start = nowNanoseconds();
}

LaunchRecording::~LaunchRecording() {
  if (host_ == nullptr) return;
  host_->end = nowNanoseconds();
  submit(std::move(*host_));
}

std::shared_ptr<std::unique_ptr<DeviceActivity>> LaunchRecording::takeShared() {
  if (work_ == nullptr) return nullptr;
  return std::make_shared<std::unique_ptr<DeviceActivity>>(std::move(work_));
}

DeviceActivityTiming::DeviceActivityTiming(std::unique_ptr<DeviceActivity>& activity)
    : activity_(activity) {
  if (activity_ != nullptr) activity_->start = nowNanoseconds();
}

DeviceActivityTiming::DeviceActivityTiming(
    const std::shared_ptr<std::unique_ptr<DeviceActivity>>& activity)
    : DeviceActivityTiming(activity != nullptr ? *activity : none_) {}

DeviceActivityTiming::~DeviceActivityTiming() {
  if (activity_ == nullptr) return;
  activity_->end = nowNanoseconds();
  submit(std::move(*activity_));
  activity_.reset();
}

}  // namespace torch_openreg
