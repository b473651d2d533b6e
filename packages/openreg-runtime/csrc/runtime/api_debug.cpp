// api_debug.cpp — C API of chaos scheduling (chaos.h).
#include <openreg.h>

#include "chaos.h"
#include "errors.h"
#include "runtime.h"
#include "stream.h"

using namespace openreg::runtime;

extern "C" {

orError_t orDebugSetChaos(int enabled, unsigned long long seed) {
  return runApi([&] {
    Runtime::instance().config();  // reads OPENREG_DEBUG first, so this call wins
    chaos::configure(enabled != 0, seed);
  });
}

orError_t orDebugGetChaos(int* enabled, unsigned long long* seed) {
  return runApi([&] {
    checkNotNull(enabled, "orDebugGetChaos: enabled");
    checkNotNull(seed, "orDebugGetChaos: seed");
    Runtime::instance().config();
    *enabled = chaos::enabled() ? 1 : 0;
    *seed = chaos::seed();
  });
}

orError_t orDebugGetChaosStatistics(unsigned long long* holds, unsigned long long* expiredHolds,
                                    unsigned long long* expiredTurns) {
  return runApi([&] {
    const chaos::Statistics statistics = chaos::statistics();
    if (holds != nullptr) *holds = statistics.holds;
    if (expiredHolds != nullptr) *expiredHolds = statistics.expiredHolds;
    if (expiredTurns != nullptr) *expiredTurns = statistics.expiredTurns;
  });
}

orError_t orDebugHoldStream(orStream_t stream) {
  return runApi([&] {
    std::shared_ptr<Stream> target = Runtime::instance().resolveStream(stream);
    if (!chaos::enabled()) return;
    target->enqueue([raw = target.get()] { raw->holdUntilWaited(chaos::kHoldPointCap); });
  });
}

}  // extern "C"
