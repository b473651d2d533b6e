// brief_lock.cpp — see brief_lock.h.
#include "base/brief_lock.h"

#include <thread>

namespace torch_openreg {
namespace {

// About 5 µs of polling: a holder that keeps the mutex longer is doing real
// work (a new segment, a collection), and then sleeping is right.
constexpr int kPolls = 200;

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

std::unique_lock<std::mutex> lockBriefly(std::mutex& mutex) {
  for (int poll = 0; poll < kPolls; ++poll) {
    if (mutex.try_lock()) return std::unique_lock<std::mutex>(mutex, std::adopt_lock);
    cpuRelax();
  }
  return std::unique_lock<std::mutex>(mutex);
}

}  // namespace torch_openreg
