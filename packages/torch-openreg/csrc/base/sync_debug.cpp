// sync_debug.cpp — the process-wide sync debug mode and its report.
#include "base/sync_debug.h"

#include <c10/util/Exception.h>

#include "base/kernel_thread.h"

namespace torch_openreg {
namespace detail {

std::atomic<int> syncDebugModeValue{0};

namespace {
thread_local int pauseDepth = 0;
}  // namespace

void reportSynchronization(const char* what) {
  // Kernel work never waits for the device it runs on.
  if (pauseDepth > 0 || insideKernel()) return;
  const auto mode = static_cast<SyncDebugMode>(syncDebugModeValue.load(std::memory_order_relaxed));
  if (mode == SyncDebugMode::Error) {
    TORCH_CHECK(false, "called a synchronizing openreg operation: ", what,
                " (torch.openreg.set_sync_debug_mode(\"error\") is set; use \"warn\" or "
                "\"default\" to allow it)");
  }
  if (mode == SyncDebugMode::Warn) {
    TORCH_WARN("called a synchronizing openreg operation: ", what);
  }
}

}  // namespace detail

void setSyncDebugMode(SyncDebugMode mode) {
  detail::syncDebugModeValue.store(static_cast<int>(mode), std::memory_order_relaxed);
}

SyncDebugMode syncDebugMode() noexcept {
  return static_cast<SyncDebugMode>(detail::syncDebugModeValue.load(std::memory_order_relaxed));
}

SyncDebugPause::SyncDebugPause() noexcept { ++detail::pauseDepth; }

SyncDebugPause::~SyncDebugPause() { --detail::pauseDepth; }

}  // namespace torch_openreg
