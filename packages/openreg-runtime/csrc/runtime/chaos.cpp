// chaos.cpp — the seed, and the per-work decision of chaos scheduling.
#include "chaos.h"

#include <condition_variable>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>

#include "errors.h"

namespace openreg::runtime::chaos {
namespace detail {
std::atomic<bool> on{false};
}  // namespace detail

namespace {

std::atomic<uint64_t> currentSeed{0};

// splitmix64: a full-avalanche mix, so neighbouring sequence numbers give
// unrelated decisions.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Decimal digits only, 1 to 2^64 - 1. strtoull would take " -5" as 2^64 - 5
// and clamp an overflow to 2^64 - 1: a seed meant to replay a run would
// silently be another seed.
std::optional<uint64_t> parseSeed(const std::string& text) {
  if (text.empty()) return std::nullopt;
  uint64_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const auto digit = static_cast<uint64_t>(c - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  if (value == 0) return std::nullopt;  // 0 means "choose a seed"
  return value;
}

uint64_t seedFromEnvironment() {
  const char* raw = std::getenv("OPENREG_DEBUG_SEED");
  if (raw == nullptr || *raw == '\0') {
    std::random_device device;
    return (uint64_t{device()} << 32 | device()) | 1;  // never 0 (0 means "choose")
  }
  const std::optional<uint64_t> seed = parseSeed(raw);
  check(seed.has_value(), orErrorInitialization, "OPENREG_DEBUG_SEED='", raw,
        "' is invalid: give a decimal integer from 1 to ", std::numeric_limits<uint64_t>::max(),
        ", digits only (no sign, spaces or prefix), such as the seed a chaos run printed; or "
        "unset it for a random seed");
  return *seed;
}

bool chaosRequested() {
  const char* raw = std::getenv("OPENREG_DEBUG");
  if (raw == nullptr) return false;
  bool chaos = false;
  std::istringstream items(raw);
  std::string item;
  while (std::getline(items, item, ',')) {
    const size_t first = item.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    item = item.substr(first, item.find_last_not_of(" \t") - first + 1);
    check(item == "races" || item == "poison" || item == "chaos", orErrorInitialization,
          "OPENREG_DEBUG='", raw, "' is invalid: '", item,
          "' is not a debug mode. Use a comma-separated list of 'races', 'poison' and 'chaos'");
    chaos = chaos || item == "chaos";
  }
  return chaos;
}

}  // namespace

void configureFromEnvironment() {
  if (chaosRequested()) configure(true, 0);
}

void configure(bool enable, uint64_t seed) {
  if (enable)
    currentSeed.store(seed != 0 ? seed : seedFromEnvironment(), std::memory_order_relaxed);
  detail::on.store(enable, std::memory_order_relaxed);
}

uint64_t seed() { return currentSeed.load(std::memory_order_relaxed); }

namespace {
std::atomic<uint64_t> holds{0};
std::atomic<uint64_t> expiredHolds{0};
std::atomic<uint64_t> expiredTurns{0};
std::mutex orderMutex;
std::condition_variable orderChanged;
std::map<uint64_t, const void*> unsettled;  // ticket -> owner
uint64_t nextTicket = 1;
}  // namespace

uint64_t takeTicket(const void* owner) {
  std::lock_guard<std::mutex> lock(orderMutex);
  unsettled.emplace(nextTicket, owner);
  return nextTicket++;
}

void waitForTurn(uint64_t ticket, const void* owner) {
  std::unique_lock<std::mutex> lock(orderMutex);
  const bool turn = orderChanged.wait_for(lock, kOrderCap, [&] {
    for (const auto& [earlier, who] : unsettled) {
      if (earlier >= ticket) return true;
      if (who != owner) return false;
    }
    return true;
  });
  if (!turn) expiredTurns.fetch_add(1, std::memory_order_relaxed);
}

void noteHoldEnded(bool expired) {
  holds.fetch_add(1, std::memory_order_relaxed);
  if (expired) expiredHolds.fetch_add(1, std::memory_order_relaxed);
}

Statistics statistics() {
  return {holds.load(std::memory_order_relaxed), expiredHolds.load(std::memory_order_relaxed),
          expiredTurns.load(std::memory_order_relaxed)};
}

void settle(uint64_t ticket) {
  if (ticket == 0) return;
  {
    std::lock_guard<std::mutex> lock(orderMutex);
    if (unsettled.erase(ticket) == 0) return;
  }
  orderChanged.notify_all();
}

uint64_t& currentTicket() {
  thread_local uint64_t ticket = 0;
  return ticket;
}

Hold decide(int device, uint64_t streamNumber, uint64_t sequence) {
  const uint64_t h =
      mix(mix(mix(seed() ^ static_cast<uint64_t>(device)) ^ streamNumber) ^ sequence);
  // One piece of work in four waits for a waiter; the rest run at once.
  // Random short delays were tried too: they made the outcome of a race
  // between two unheld pieces of work depend on timing again, so a seed no
  // longer replayed a run.
  return Hold{(h & 3) == 0};
}

}  // namespace openreg::runtime::chaos
