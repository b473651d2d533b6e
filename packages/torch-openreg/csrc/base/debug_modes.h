// debug_modes.h — which bug-finding modes are on (OPENREG_DEBUG), and the
// observer through which lower layers report ordering events to the race
// detector.
//
// The modes are read once from OPENREG_DEBUG (a comma-separated list of
// races, poison, chaos; validated) and can be changed from Python. Every hot
// path asks with one relaxed atomic load, so a process without debug modes
// pays nothing else. The race detector itself lives in the engine layer;
// integration points below it (events, stream/device synchronization, the
// device allocator) reach it through StreamOrderObserver, which the engine
// installs, so includes still point downward only.
#pragma once

#include <openreg.h>

#include <c10/core/Device.h>
#include <c10/core/Scalar.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Stream.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace torch_openreg {

enum DebugMode : unsigned {
  kDebugRaces = 1u << 0,
  kDebugPoison = 1u << 1,
  kDebugChaos = 1u << 2,
};

namespace detail {
extern std::atomic<unsigned> debugModeBits;
}

// True when `mode` is on. One relaxed load: the flag only gates work, and a
// mode switched on from Python applies to calls made after the switch.
inline bool debugModeOn(DebugMode mode) {
  return (detail::debugModeBits.load(std::memory_order_relaxed) & mode) != 0;
}
inline unsigned debugModes() { return detail::debugModeBits.load(std::memory_order_relaxed); }
void setDebugModes(unsigned modes);
// "races,poison" for the bits set; and the bits of such a list (throws,
// naming the accepted values, on anything else).
std::string debugModeNames(unsigned modes);
unsigned parseDebugModes(const std::string& list, const char* source);

// OPENREG_DEBUG_RACES=report|error: a race warns (and is counted for the exit
// summary) or raises at the offending call.
bool raceErrorsRaise();
void setRaceErrorsRaise(bool raise);

// Reads OPENREG_DEBUG and OPENREG_DEBUG_RACES (raises, naming the accepted
// values, if either is invalid). Called once when torch_openreg initialises.
void readDebugEnvironment();

// The byte every poisoned allocation is filled with, by allocators that do not
// know what the memory will hold: all-ones is a NaN in most floating-point
// formats, the maximum of every unsigned type, but -1 in every signed integer
// type, a valid index and a value that sums cancel.
constexpr int kPoisonByte = 0xFF;

// What a poisoned element of `type` holds instead where the dtype is known
// (the openreg factories fill it over the byte fill): for signed integers a
// value no data holds — the minimum of int8/16/32 (indexing with it raises,
// sums of it, computed in int64, grow with the count), for int64, whose
// minimum would wrap to 0 when two are added, the 64-bit golden-ratio constant
// 0x9E3779B97F4A7C15 read as signed (its multiples stay far from 0 for any
// sum of up to a million elements); NaN for the float8 types whose only NaN is
// 0x80. nullopt where the byte fill already is such a value.
std::optional<c10::Scalar> typedPoisonValue(c10::ScalarType type);

// Ordering events seen by the integration layer, for the race detector.
class StreamOrderObserver {
 public:
  virtual ~StreamOrderObserver() = default;
  virtual void eventRecorded(const void* event, const c10::Stream& stream) = 0;
  virtual void streamWaitedForEvent(const c10::Stream& stream, const void* event) = 0;
  virtual void eventSynchronized(const void* event) = 0;
  virtual void streamSynchronized(const c10::Stream& stream) = 0;
  virtual void deviceSynchronized(c10::DeviceIndex device) = 0;
  // `stream`: the stream the memory is allocated for (its new owner's).
  virtual void memoryAllocated(const void* pointer, size_t bytes, orStream_t stream) = 0;
  virtual void memoryFreed(const void* pointer) = 0;
  virtual void streamRecorded(const void* pointer, const c10::Stream& stream) = 0;
  // The event (or another handle recorded like one, such as a collective's
  // Work) is gone; its address may be reused.
  virtual void eventDestroyed(const void* event) = 0;
};

// The installed observer, or nullptr while race detection is off.
StreamOrderObserver* streamOrderObserver();
void installStreamOrderObserver(StreamOrderObserver* observer);

// Calls `member(args...)` on the observer when race detection is on.
template <typename Member, typename... Args>
inline void notifyStreamOrder(Member member, Args&&... args) {
  if (!debugModeOn(kDebugRaces)) return;
  if (StreamOrderObserver* observer = streamOrderObserver())
    (observer->*member)(std::forward<Args>(args)...);
}

}  // namespace torch_openreg
