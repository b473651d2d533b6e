// stream.cpp — stream pools and the per-thread current stream.
#include "integration/stream.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>

#include "base/debug_modes.h"
#include "base/device.h"
#include "base/runtime_check.h"
#include "base/stream_capture.h"
#include "base/sync_debug.h"

namespace torch_openreg {
namespace {

constexpr int kPoolSize = kMaxPriorityLevels * kStreamsPerPriority;

struct DevicePool {
  std::once_flag defaultOnce;
  std::atomic<orStream_t> defaultHandle{nullptr};
  std::mutex creation;
  std::array<std::atomic<orStream_t>, kPoolSize> handles{};
  std::array<std::atomic<uint32_t>, kMaxPriorityLevels> nextSlot{};
};

std::array<DevicePool, OPENREG_MAX_DEVICES>& pools() {
  static auto* all = new std::array<DevicePool, OPENREG_MAX_DEVICES>();
  return *all;
}

thread_local std::array<c10::StreamId, OPENREG_MAX_DEVICES> currentIds{};  // 0: default

int levelOf(int priority) {
  const PriorityRange range = priorityRange();
  const int clamped = std::clamp(priority, range.greatest, range.least);
  return range.least - clamped;  // 0 for the least priority
}

c10::Stream makeStream(c10::DeviceIndex device, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, openregDevice(device), id);
}

orStream_t defaultHandle(c10::DeviceIndex device) {
  DevicePool& pool = pools()[device];
  std::call_once(pool.defaultOnce, [&] {
    DeviceScope scope(device);
    orStream_t handle = nullptr;
    OPENREG_CHECK(orStreamGetDefault(&handle));
    pool.defaultHandle.store(handle);
    markDeviceUsed(device);
  });
  return pool.defaultHandle.load();
}

orStream_t poolHandle(c10::DeviceIndex device, int index) {
  DevicePool& pool = pools()[device];
  if (orStream_t handle = pool.handles[index].load(std::memory_order_acquire)) return handle;
  std::lock_guard<std::mutex> lock(pool.creation);
  if (orStream_t handle = pool.handles[index].load()) return handle;
  DeviceScope scope(device);
  orStream_t handle = nullptr;
  const int priority = priorityRange().least - index / kStreamsPerPriority;
  OPENREG_CHECK(orStreamCreateWithPriority(&handle, orStreamDefault, priority));
  pool.handles[index].store(handle, std::memory_order_release);
  markDeviceUsed(device);
  return handle;
}

void checkOpenRegStream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "expected an openreg stream, got a ", stream.device_type(), " stream");
  const PriorityRange range = priorityRange();
  const int64_t poolStreams = (range.least - range.greatest + 1) * kStreamsPerPriority;
  TORCH_CHECK(stream.id() >= 0 && stream.id() <= poolStreams, "invalid openreg stream id ",
              stream.id());
  checkedDevice(stream.device_index());
}

PriorityRange queryPriorityRange() {
  PriorityRange range{};
  OPENREG_CHECK(orDeviceGetStreamPriorityRange(&range.least, &range.greatest));
  TORCH_CHECK(range.least - range.greatest + 1 <= kMaxPriorityLevels,
              "openreg: the runtime offers stream priorities ", range.least, "..", range.greatest,
              ", more levels than this build of torch-openreg supports (", kMaxPriorityLevels,
              "); rebuild torch-openreg against this runtime");
  return range;
}

}  // namespace

PriorityRange priorityRange() {
  static const PriorityRange range = queryPriorityRange();
  return range;
}

orStream_t nativeHandle(const c10::Stream& stream) {
  checkOpenRegStream(stream);
  if (stream.id() == 0) return defaultHandle(stream.device_index());
  return poolHandle(stream.device_index(), static_cast<int>(stream.id() - 1));
}

c10::Stream defaultStream(c10::DeviceIndex device) { return makeStream(resolveDevice(device), 0); }

c10::Stream currentStream(c10::DeviceIndex device) {
  device = resolveDevice(device);
  return makeStream(device, currentIds[device]);
}

c10::Stream exchangeStream(const c10::Stream& stream) {
  checkOpenRegStream(stream);
  const c10::DeviceIndex device = stream.device_index();
  c10::Stream previous = makeStream(device, currentIds[device]);
  currentIds[device] = stream.id();
  return previous;
}

c10::Stream streamFromPool(c10::DeviceIndex device, int priority) {
  device = resolveDevice(device);
  const int level = levelOf(priority);
  const uint32_t slot = pools()[device].nextSlot[level].fetch_add(1) % kStreamsPerPriority;
  return makeStream(device, 1 + level * kStreamsPerPriority + static_cast<c10::StreamId>(slot));
}

int streamPriority(const c10::Stream& stream) {
  checkOpenRegStream(stream);
  if (stream.id() == 0) return priorityRange().least;
  return priorityRange().least - static_cast<int>((stream.id() - 1) / kStreamsPerPriority);
}

bool queryStream(const c10::Stream& stream) {
  checkStreamWait(nativeHandle(stream), "Stream.query()");
  const bool done = completed(orStreamQuery(nativeHandle(stream)));
  if (done) notifyStreamOrder(&StreamOrderObserver::streamSynchronized, stream);
  return done;
}

void synchronizeStream(const c10::Stream& stream) {
  // Stream.synchronize() counts for the sync debug mode, as on CUDA (device
  // and event synchronization do not).
  checkSynchronization("Stream.synchronize()");
  checkStreamWait(nativeHandle(stream), "Stream.synchronize()");
  OPENREG_CHECK(orStreamSynchronize(nativeHandle(stream)));
  notifyStreamOrder(&StreamOrderObserver::streamSynchronized, stream);
}

}  // namespace torch_openreg
