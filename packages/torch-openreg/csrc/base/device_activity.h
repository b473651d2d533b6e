// device_activity.h — what stream work did, recorded for the profiler.
//
// In base/ because both sides use it: the engine records (kernel_launch.cpp)
// and the profiler integration reads (integration/profiler.cpp), and
// integration/ may not include engine/.
//
// A profiler session (integration/profiler.cpp) switches the recorder on;
// then every piece of stream work — a kernel, a copy, a collective — yields
// one DeviceActivity: its device and stream, when the host launched it, when
// the worker started and finished it (measured on the worker itself, around
// the body), and the correlation id of the operator that launched it (the
// profiler pushes one per operator on the launching thread). The engine
// knows nothing of Kineto: it only stamps times and hands records over.
//
// Off (the normal case) a launch pays one relaxed atomic load: the records
// are heap objects made only while recording, so the launch structures need
// no room for them.
#pragma once

#include <c10/core/Stream.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace torch_openreg {

enum class ActivityKind : uint8_t { Kernel, Memcpy, Collective };

struct DeviceActivity {
  ActivityKind kind = ActivityKind::Kernel;
  const char* label = nullptr;  // static text for copies and collectives; null for kernels
  c10::DeviceIndex device = 0;
  c10::StreamId stream = 0;
  uint64_t correlation = 0;  // the launching operator's profiler id (0: none)
  uint64_t launch = 0;       // unique per launch: links the host launch to the device work
  int64_t hostThread = 0;    // system thread id of the launching thread
  int64_t start = 0;  // ns since the Unix epoch (the profiler's clock), on the worker
  int64_t end = 0;    // or, for a host record, around the launch call
  bool host = false;  // the host's launch (start/end: the launch call) rather than the work
};

namespace detail {
extern std::atomic<bool> deviceActivityOn;
}

inline bool recordingDeviceActivity() {
  return detail::deviceActivityOn.load(std::memory_order_relaxed);
}

// Session control (integration/profiler.cpp).
void startDeviceActivityRecording();
void stopDeviceActivityRecording();
std::vector<DeviceActivity> takeDeviceActivities();

// The profiler's operator correlation ids, per launching thread.
void pushLaunchCorrelation(uint64_t correlation);
void popLaunchCorrelation();

// Work launched inside this scope is recorded as `kind` with `label` (a
// static string, e.g. "Memcpy HtoD") instead of as a kernel.
class DeviceActivityKindScope {
 public:
  DeviceActivityKindScope(ActivityKind kind, const char* label);
  ~DeviceActivityKindScope();
  DeviceActivityKindScope(const DeviceActivityKindScope&) = delete;
  DeviceActivityKindScope& operator=(const DeviceActivityKindScope&) = delete;

 private:
  ActivityKind previousKind_;
  const char* previousLabel_;
};

// Host side, around one launch: while the recorder is on, makes the record
// the work carries to the worker (take()), and on destruction submits the
// host's half — the launch itself, from construction to destruction — as a
// record of its own (host = true), so the worker never shares a record with
// the host. Off, it holds nothing.
class LaunchRecording {
 public:
  explicit LaunchRecording(const c10::Stream& stream);
  ~LaunchRecording();
  LaunchRecording(const LaunchRecording&) = delete;
  LaunchRecording& operator=(const LaunchRecording&) = delete;
  std::unique_ptr<DeviceActivity> take() { return std::move(work_); }
  // take() for work queued as a std::function: null when not recording, so
  // nothing is allocated then.
  std::shared_ptr<std::unique_ptr<DeviceActivity>> takeShared();

 private:
  std::unique_ptr<DeviceActivity> work_;
  std::unique_ptr<DeviceActivity> host_;
};

// Worker side: times the work done during its lifetime and submits the
// record when it ends. Does nothing for a null record.
class DeviceActivityTiming {
 public:
  explicit DeviceActivityTiming(std::unique_ptr<DeviceActivity>& activity);
  // For work queued as a (copyable) std::function, which holds its record
  // through a shared pointer; null when not recording.
  explicit DeviceActivityTiming(const std::shared_ptr<std::unique_ptr<DeviceActivity>>& activity);
  ~DeviceActivityTiming();
  DeviceActivityTiming(const DeviceActivityTiming&) = delete;
  DeviceActivityTiming& operator=(const DeviceActivityTiming&) = delete;

 private:
  std::unique_ptr<DeviceActivity> none_;
  std::unique_ptr<DeviceActivity>& activity_;
};

}  // namespace torch_openreg
