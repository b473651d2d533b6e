// stream.h — PyTorch streams (c10::Stream) over runtime streams (orStream_t).
//
// As with CUDA: each device has a default stream (id 0) and a lazily created
// pool of 32 streams per priority level (0, -1, -2) handed out round-robin;
// the current stream is per host thread and per device. A c10::Stream id is
// 1 + level * 32 + slot, so ids map to runtime handles without any lookup
// table that could grow.
#pragma once

#include <openreg.h>

#include <c10/core/Stream.h>

namespace torch_openreg {

constexpr int kStreamsPerPriority = 32;
// Pools are sized for at most this many priority levels; the runtime's range
// (orDeviceGetStreamPriorityRange) must fit.
constexpr int kMaxPriorityLevels = 8;

struct PriorityRange {
  int least;     // the default priority
  int greatest;  // numerically lowest
};
// The runtime's stream priority range (asked once).
PriorityRange priorityRange();

// The runtime handle behind a c10::Stream of the openreg device.
orStream_t nativeHandle(const c10::Stream& stream);

c10::Stream defaultStream(c10::DeviceIndex device);
c10::Stream currentStream(c10::DeviceIndex device);
// Makes `stream` current on its device for this thread; returns the previous one.
c10::Stream exchangeStream(const c10::Stream& stream);
// A pool stream of the given priority (clamped to the supported range, as CUDA does).
c10::Stream streamFromPool(c10::DeviceIndex device, int priority);
int streamPriority(const c10::Stream& stream);

bool queryStream(const c10::Stream& stream);
void synchronizeStream(const c10::Stream& stream);

}  // namespace torch_openreg
