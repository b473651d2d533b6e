// runtime.h — process-wide runtime state: configuration, devices, handles.
//
// Devices are created lazily on first use (a device's memory mapping, its
// default stream and the SIGSEGV handler come with it), so that asking for
// the device count stays cheap and fork-safe. Once any device is active, a
// forked child refuses device work, as CUDA does: its worker threads did not
// survive the fork and its memory would be shared with the parent.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "device_memory.h"
#include "environment.h"
#include "event.h"
#include "handle_registry.h"
#include "host_memory.h"
#include "pending_release.h"
#include "stream.h"

namespace openreg::runtime {

class Device {
 public:
  Device(int index, size_t capacity);

  int index() const { return index_; }
  DeviceMemory& memory() { return memory_; }
  const std::shared_ptr<Stream>& defaultStream() const { return defaultStream_; }

  void trackStream(const std::shared_ptr<Stream>& stream);
  // All live streams of the device, default stream first.
  std::vector<std::shared_ptr<Stream>> liveStreams();
  // Appends a fence for each of the device's streams with unfinished work.
  void appendUnfinishedWork(std::vector<Fence>& fences);

 private:
  const int index_;
  DeviceMemory memory_;
  std::shared_ptr<Stream> defaultStream_;
  std::mutex streamsMutex_;
  std::vector<std::weak_ptr<Stream>> streams_;
};

class Runtime {
 public:
  static Runtime& instance();

  const RuntimeConfig& config();  // throws orErrorInitialization on bad env
  int deviceCount() { return config().deviceCount; }
  void checkDeviceIndex(int index);
  // Validates the index and activates the device on first use.
  Device& device(int index);
  Device& currentDevice() { return device(currentDeviceIndex()); }
  int currentDeviceIndex();
  void setCurrentDevice(int index);

  // The active device whose memory contains `pointer`, if any (lock-free).
  Device* deviceContaining(const void* pointer);
  Device* deviceContainingKernelAddress(const void* pointer);
  Device* activeDevice(int index) { return devices_[index].load(std::memory_order_acquire); }

  HostMemory& hostMemory() { return hostMemory_; }
  HandleRegistry<Stream>& streams() { return streams_; }
  HandleRegistry<Event>& events() { return events_; }

  // Resolves a stream handle; NULL means the current device's default stream.
  std::shared_ptr<Stream> resolveStream(const void* handle);

  // A fence per stream, of any active device, with unfinished work: memory
  // freed now may be touched by that work until the fences are passed.
  std::vector<Fence> unfinishedWork();

  void markForkedChild() { forkedChild_.store(true); }
  // Throws orErrorInitialization in a forked child of a process that used
  // devices: device memory is shared with the parent, so it must not be touched.
  void requireNotForkedChild() const;

 private:
  Runtime() = default;
  Device& activate(int index);

  std::once_flag configOnce_;
  std::optional<RuntimeConfig> config_;
  std::optional<ApiError> configError_;
  // *config_ once it was read without error: every device check (each
  // operator's device guard) reads the configuration, and this makes that one
  // load instead of std::call_once (two thread-local stores and a
  // pthread_once call each time).
  std::atomic<const RuntimeConfig*> configRead_{nullptr};

  std::mutex activationMutex_;
  std::array<std::atomic<Device*>, OPENREG_MAX_DEVICES> devices_{};
  std::atomic<bool> anyDeviceActive_{false};
  std::atomic<bool> forkedChild_{false};

  HostMemory hostMemory_;
  HandleRegistry<Stream> streams_{"stream"};
  HandleRegistry<Event> events_{"event"};
};

}  // namespace openreg::runtime
