// kernel_launch.cpp — stream launch with TLS propagation and error transport.
#include "kernel_launch.h"

#include <ATen/ThreadLocalState.h>
#include <Python.h>

#include <exception>

#include "device.h"
#include "kernel_allocator.h"
#include "runtime_check.h"
#include "stream.h"

namespace torch_openreg {
namespace {

thread_local int kernelDepth = 0;

// Releases the GIL for the scope if this thread holds it.
class GilRelease {
 public:
  GilRelease() {
    if (Py_IsInitialized() && PyGILState_Check()) saved_ = PyEval_SaveThread();
  }
  ~GilRelease() {
    if (saved_ != nullptr) PyEval_RestoreThread(saved_);
  }
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;

 private:
  PyThreadState* saved_ = nullptr;
};

}  // namespace

bool insideKernel() { return kernelDepth > 0; }

void runOnDevice(c10::DeviceIndex device, const std::function<void()>& body) {
  if (insideKernel()) {
    // Nested launch from inside a kernel (e.g. a kernel that calls another
    // openreg op): already on a worker, run inline.
    KernelAllocationScope allocations(device);
    body();
    return;
  }
  markDeviceUsed(device);
  orStream_t stream = nativeHandle(currentStream(device));
  const at::ThreadLocalState callerState;
  std::exception_ptr failure;
  auto work = [&] {
    at::ThreadLocalStateGuard state(callerState);
    KernelAllocationScope allocations(device);
    ++kernelDepth;
    try {
      body();
    } catch (...) {
      failure = std::current_exception();
    }
    --kernelDepth;
  };
  OPENREG_CHECK(openreg::launchHostFunc(stream, work));
  {
    GilRelease unlocked;
    OPENREG_CHECK(orStreamSynchronize(stream));
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace torch_openreg
