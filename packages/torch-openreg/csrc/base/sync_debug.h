// sync_debug.h — torch.openreg.set_sync_debug_mode: warn or raise on calls
// that make the host wait for the device.
//
// Mirrors torch.cuda's sync debug mode. The check sits where a CUDA program
// synchronizes by what it asks for (a value read on the host, a blocking copy,
// a data-dependent result size, Stream.synchronize), not wherever this backend
// happens to wait: the synchronous first run of a new operator signature is an
// implementation detail CUDA does not have, so it never warns. Device and event
// synchronization stay silent, as on CUDA. The mode is process-wide; the
// warning is issued on the calling thread, so Python attributes it to the
// calling line, and "error" raises before anything runs.
#pragma once

#include <atomic>

namespace torch_openreg {

enum class SyncDebugMode : int { Default = 0, Warn = 1, Error = 2 };

void setSyncDebugMode(SyncDebugMode mode);
SyncDebugMode syncDebugMode() noexcept;

namespace detail {
extern std::atomic<int> syncDebugModeValue;
void reportSynchronization(const char* what);
}  // namespace detail

// Called by a synchronizing call before it waits; `what` names the call for
// the message. Does nothing in the default mode or while paused.
inline void checkSynchronization(const char* what) {
  if (detail::syncDebugModeValue.load(std::memory_order_relaxed) != 0) {
    detail::reportSynchronization(what);
  }
}

// Silences the check on this thread for the scope: for waits that are the
// implementation of a call CUDA makes without synchronizing (the copy-based
// fallback's copies to the host and back).
class SyncDebugPause {
 public:
  SyncDebugPause() noexcept;
  ~SyncDebugPause();
  SyncDebugPause(const SyncDebugPause&) = delete;
  SyncDebugPause& operator=(const SyncDebugPause&) = delete;
};

}  // namespace torch_openreg
