// chaos.h — OPENREG_DEBUG=chaos: seeded, randomised scheduling of stream work.
//
// A missing synchronization is harmless whenever the work it should have
// waited for happens to finish first, which on an idle machine is most of the
// time. Under chaos scheduling the device runs work in launch order across
// all streams (each piece waits until every piece launched before it has
// completed or is held), except that seeded choices of work are held until
// something waits for them (a synchronize, an event wait or query, another
// stream waiting for it): run as late as allowed. FIFO order per stream and
// event waits are untouched, so correct programs stay correct; and since
// nothing but the seed decides what runs before what, a race gives the same
// result on every run. The decision for the n-th piece of work of a stream is a hash of
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
  bool untilWaited;  // hold until something waits for the work (capped), else run at once
};
Hold decide(int device, uint64_t streamNumber, uint64_t sequence);

// Launch order: every piece of work enqueued while chaos is on gets a ticket
// (`owner` is its stream, opaque here).
uint64_t takeTicket(const void* owner);
// Blocks until every ticket before `ticket` of other owners has settled
// (completed, held, or waiting for other work), or kOrderCap has passed.
// Tickets of the same owner are queued behind the caller (FIFO): not waited for.
void waitForTurn(uint64_t ticket, const void* owner);
// The work holding `ticket` no longer blocks later work (it completed, or it
// is held). Idempotent.
void settle(uint64_t ticket);
// The ticket of the work running on this thread (0: none).
uint64_t& currentTicket();

// What chaos scheduling did (orDebugGetChaosStatistics): pieces of work held
// until waited for (random holds and hold points), how many of them ran at
// their cap because nothing the runtime could see waited for them, and how
// many turns in launch order gave up waiting at kOrderCap.
struct Statistics {
  uint64_t holds;
  uint64_t expiredHolds;
  uint64_t expiredTurns;
};
Statistics statistics();
// A hold ends: `expired` when it ran at its cap rather than because of a waiter.
void noteHoldEnded(bool expired);

constexpr auto kOrderCap = std::chrono::seconds(1);
// The most a held piece of work waits for a waiter before running anyway.
constexpr auto kRandomHoldCap = std::chrono::seconds(1);
constexpr auto kHoldPointCap = std::chrono::seconds(2);

}  // namespace openreg::runtime::chaos
