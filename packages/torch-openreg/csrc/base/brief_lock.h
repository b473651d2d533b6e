// brief_lock.h — locking a mutex whose critical sections are short.
//
// A contended std::mutex sends the waiting thread to sleep in the kernel, and
// its holder pays a futex wake-up when it unlocks: on a small VM that costs
// tens of microseconds of CPU time (docs/streams.md), far more than critical
// sections like the device allocator's (about a microsecond). Polling the
// mutex for a few microseconds first keeps a stream worker and a host thread
// that allocate at the same moment out of the kernel.
#pragma once

#include <mutex>

namespace torch_openreg {

std::unique_lock<std::mutex> lockBriefly(std::mutex& mutex);

}  // namespace torch_openreg
