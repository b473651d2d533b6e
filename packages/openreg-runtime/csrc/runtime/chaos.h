// chaos.h — OPENREG_DEBUG=chaos: seeded, randomised scheduling of stream work.
//
// A missing synchronization is harmless whenever the work it should have
// waited for happens to finish first, which on an idle machine is most of the
// time. Under chaos scheduling each stream worker, before running a piece of
// work, may hold it until something waits for it (a synchronize, an event
// wait or query, another stream waiting for it) or briefly delay it; FIFO
// order per stream and event waits are untouched, so correct programs stay
// correct. The decision for the n-th piece of work of a stream is a hash of
// (seed, device, the stream's creation number, n): for a given seed a program
// sees the same holds every run, so a failure replays with
// OPENREG_DEBUG_SEED. A hold point (orDebugHoldStream) holds later work until
// it is waited for — the latest a non_blocking copy into host memory may
// complete — and a held piece of work runs anyway after a cap, so a program
// that never waits still finishes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace openreg::runtime::chaos {

namespace detail {
extern std::atomic<bool> on;
}

inline bool enabled() { return detail::on.load(std::memory_order_relaxed); }
// Reads OPENREG_DEBUG (a comma-separated list of races, poison, chaos; the
// runtime acts on chaos only) and OPENREG_DEBUG_SEED; throws ApiError with
// orErrorInitialization on invalid values.
void configureFromEnvironment();
// seed 0: OPENREG_DEBUG_SEED if set, otherwise a new random seed.
void configure(bool enable, uint64_t seed);
uint64_t seed();

struct Hold {
  bool untilWaited;                 // hold until something waits for the work (capped)
  std::chrono::microseconds delay;  // otherwise, sleep this long first (may be 0)
};
Hold decide(int device, uint64_t streamNumber, uint64_t sequence);

// The most a held piece of work waits for a waiter before running anyway.
constexpr auto kRandomHoldCap = std::chrono::milliseconds(2);
constexpr auto kHoldPointCap = std::chrono::seconds(2);

}  // namespace openreg::runtime::chaos
