// kernel_thread.h — whether this thread is running openreg kernel work.
//
// Kernels run on stream worker threads. A few lower layers must behave
// differently there: the block pool serves kernels from kernel-private blocks,
// and waiting for the device from inside its own work would never return. The
// flag lives here, below those layers, and the launch layer sets it.
#pragma once

namespace torch_openreg {

// True on a thread that is currently running openreg kernel work.
bool insideKernel() noexcept;

// Marks this thread as running kernel work for the scope (nests).
class KernelThreadScope {
 public:
  KernelThreadScope() noexcept;
  ~KernelThreadScope();
  KernelThreadScope(const KernelThreadScope&) = delete;
  KernelThreadScope& operator=(const KernelThreadScope&) = delete;
};

}  // namespace torch_openreg
