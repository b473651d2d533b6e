// kernel_thread.cpp — the per-thread "inside a kernel" depth and stream.
#include "base/kernel_thread.h"

namespace torch_openreg {
namespace {
thread_local int kernelDepth = 0;
thread_local orStream_t runningStream = nullptr;
}  // namespace

bool insideKernel() noexcept { return kernelDepth > 0; }

orStream_t runningKernelStream() noexcept { return runningStream; }

KernelThreadScope::KernelThreadScope(orStream_t stream) noexcept {
  if (kernelDepth++ == 0) runningStream = stream;
}

KernelThreadScope::~KernelThreadScope() {
  if (--kernelDepth == 0) runningStream = nullptr;
}

}  // namespace torch_openreg
