// kernel_thread.h — whether this thread is running openreg kernel work, and
// on which stream.
//
// Kernels run on stream worker threads. A few lower layers must behave
// differently there: waiting for the device from inside its own work would
// never return, and the block pool may hand a kernel only memory that no work
// queued behind it still uses, which it judges by the running stream's
// progress. The state lives here, below those layers, and the launch layer
// sets it.
#pragma once

#include <openreg.h>

namespace torch_openreg {

// True on a thread that is currently running openreg kernel work.
bool insideKernel() noexcept;
// The stream whose work this thread runs (null outside kernel work).
orStream_t runningKernelStream() noexcept;

// Marks this thread as running kernel work of `stream` for the scope (nests:
// the outermost stream stays the running one).
class KernelThreadScope {
 public:
  explicit KernelThreadScope(orStream_t stream) noexcept;
  ~KernelThreadScope();
  KernelThreadScope(const KernelThreadScope&) = delete;
  KernelThreadScope& operator=(const KernelThreadScope&) = delete;
};

}  // namespace torch_openreg
