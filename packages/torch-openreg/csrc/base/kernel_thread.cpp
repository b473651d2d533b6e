// kernel_thread.cpp — the per-thread "inside a kernel" depth.
#include "base/kernel_thread.h"

namespace torch_openreg {
namespace {
thread_local int kernelDepth = 0;
}  // namespace

bool insideKernel() noexcept { return kernelDepth > 0; }

KernelThreadScope::KernelThreadScope() noexcept { ++kernelDepth; }

KernelThreadScope::~KernelThreadScope() { --kernelDepth; }

}  // namespace torch_openreg
