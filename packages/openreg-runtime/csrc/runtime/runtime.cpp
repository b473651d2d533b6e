// runtime.cpp — lazy device activation, current device, fork protection.
#include "runtime.h"

#include <pthread.h>

#include <algorithm>
#include <sstream>

#include "device_registry.h"
#include "fault_handler.h"

namespace openreg::runtime {
namespace {
thread_local int currentDeviceOfThread = 0;

void markChildAfterFork() { Runtime::instance().markForkedChild(); }
}  // namespace

Device::Device(int index, size_t capacity)
    : index_(index),
      memory_(index, capacity),
      defaultStream_(std::make_shared<Stream>(index, 0, orStreamDefault, true)) {
  // Published before the device is: no allocation or work can precede it.
  memory_.publishBytesInUseTo(registerDevice(index, capacity));
}

void Device::trackStream(const std::shared_ptr<Stream>& stream) {
  std::lock_guard<std::mutex> lock(streamsMutex_);
  // Drop streams that no longer exist so the list stays short.
  streams_.erase(std::remove_if(streams_.begin(), streams_.end(),
                                [](const std::weak_ptr<Stream>& entry) { return entry.expired(); }),
                 streams_.end());
  streams_.push_back(stream);
}

std::vector<std::shared_ptr<Stream>> Device::liveStreams() {
  std::vector<std::shared_ptr<Stream>> live{defaultStream_};
  std::lock_guard<std::mutex> lock(streamsMutex_);
  for (const auto& entry : streams_) {
    if (auto stream = entry.lock()) live.push_back(std::move(stream));
  }
  return live;
}

void Device::appendUnfinishedWork(std::vector<Fence>& fences) {
  // Inside stream work, the running stream is ordered at that work: what it
  // queued before has completed, and what is queued behind it runs after
  // this point in stream order (see orFree in openreg.h).
  const Stream* running = streamOfCurrentWork();
  auto appendIfBusy = [&fences, running](std::shared_ptr<Stream> stream) {
    if (stream.get() != running && !stream->idle()) {
      const uint64_t sequence = stream->lastEnqueued();
      fences.push_back(Fence{std::move(stream), sequence});
    }
  };
  appendIfBusy(defaultStream_);
  std::lock_guard<std::mutex> lock(streamsMutex_);
  for (const auto& entry : streams_) {
    if (auto stream = entry.lock()) appendIfBusy(std::move(stream));
  }
}

Runtime& Runtime::instance() {
  // Never destroyed: detached stream workers may still run during exit.
  static Runtime* runtime = new Runtime();
  return *runtime;
}

const RuntimeConfig& Runtime::config() {
  if (const RuntimeConfig* read = configRead_.load(std::memory_order_acquire)) return *read;
  std::call_once(configOnce_, [this] {
    try {
      config_ = readConfigFromEnvironment();
    } catch (const ApiError& error) {
      configError_ = error;
    }
  });
  if (configError_) throw *configError_;
  configRead_.store(&*config_, std::memory_order_release);
  return *config_;
}

void Runtime::checkDeviceIndex(int index) {
  const int count = deviceCount();
  if (index >= 0 && index < count) return;
  std::ostringstream devices;
  if (count == 1) {
    devices << "there is 1 OpenReg device (valid index: 0)";
  } else {
    devices << "there are " << count << " OpenReg devices (valid indices: 0.." << count - 1 << ")";
  }
  fail(orErrorInvalidDevice, "device index ", index, " is out of range: ", devices.str(),
       "; set OPENREG_DEVICE_COUNT to change the count");
}

void Runtime::requireNotForkedChild() const {
  check(!forkedChild_.load(), orErrorInitialization,
        "OpenReg was initialised in the parent process and cannot be used in a forked child; "
        "start subprocesses with the 'spawn' (or 'forkserver') method");
}

Device& Runtime::device(int index) {
  checkDeviceIndex(index);
  requireNotForkedChild();
  Device* active = devices_[index].load(std::memory_order_acquire);
  return active != nullptr ? *active : activate(index);
}

Device& Runtime::activate(int index) {
  std::lock_guard<std::mutex> lock(activationMutex_);
  if (Device* active = devices_[index].load()) return *active;
  if (!anyDeviceActive_.exchange(true)) {
    pthread_atfork(nullptr, nullptr, &markChildAfterFork);
    installFaultHandler();
  }
  auto* created = new Device(index, config().deviceMemoryBytes);
  streams_.add(created->defaultStream());
  devices_[index].store(created, std::memory_order_release);
  return *created;
}

int Runtime::currentDeviceIndex() { return currentDeviceOfThread; }

void Runtime::setCurrentDevice(int index) {
  checkDeviceIndex(index);
  currentDeviceOfThread = index;
}

Device* Runtime::deviceContaining(const void* pointer) {
  for (auto& slot : devices_) {
    Device* device = slot.load(std::memory_order_acquire);
    if (device != nullptr && device->memory().containsDeviceAddress(pointer)) return device;
  }
  return nullptr;
}

Device* Runtime::deviceContainingKernelAddress(const void* pointer) {
  for (auto& slot : devices_) {
    Device* device = slot.load(std::memory_order_acquire);
    if (device != nullptr && device->memory().containsKernelAddress(pointer)) return device;
  }
  return nullptr;
}

std::shared_ptr<Stream> Runtime::resolveStream(const void* handle) {
  if (handle == nullptr) return currentDevice().defaultStream();
  requireNotForkedChild();
  return streams_.get(handle);
}

std::vector<Fence> Runtime::unfinishedWork() {
  std::vector<Fence> fences;
  for (auto& slot : devices_) {
    if (Device* device = slot.load(std::memory_order_acquire)) device->appendUnfinishedWork(fences);
  }
  return fences;
}

}  // namespace openreg::runtime
