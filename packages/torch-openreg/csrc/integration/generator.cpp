// generator.cpp — openreg generators wrapping CPU engines; default per device.
#include "integration/generator.h"

#include <openreg.h>

#include <array>
#include <memory>
#include <mutex>

#include "base/device.h"
#include "base/gil.h"
#include "base/kernel_thread.h"
#include "base/runtime_check.h"
#include "base/stream_capture.h"
#include "integration/stream.h"

namespace torch_openreg {

GeneratorImpl::GeneratorImpl(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(openregDevice(device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      engine_(at::detail::createCPUGenerator(seed)) {}

// The engine has its own mutex, which CPU kernels take; state access takes it
// too so that it never races with a kernel drawing numbers. Kernels draw when
// they run, which may be after the host call that queued them: state access
// first waits for the device, so the host sees (and changes) the state as of
// all work queued so far, as with CUDA, whose random kernels reserve their
// numbers when launched.
// The wait releases the GIL (when this thread holds it): queued kernels may
// need it to start. Kernels launched under Python saved-tensor hooks restore
// them on the worker, and torch.utils.checkpoint sets the RNG state from inside
// those hooks while such kernels are queued.
void GeneratorImpl::waitForQueuedDraws() const {
  if (insideKernel()) return;  // a kernel is already ordered with the others
  // As CUDA's generator: the state is the host's, not the graph's, so it may
  // not be read or changed from the stream that captures.
  std::shared_ptr<StreamCapture> capture =
      captureUnderway() ? captureOf(nativeHandle(currentStream(device().index()))) : nullptr;
  if (capture != nullptr) {
    failCapture(capture,
                "openreg: the random number generator's state cannot be read or changed from a "
                "stream that captures a graph (its draws happen when the graph replays, and "
                "every replay draws new numbers from the generator): seed before capturing or "
                "before replaying, as with CUDA graphs.");
  }
  DeviceScope scope(device().index());
  orError_t status = orSuccess;
  {
    GilReleasedIfHeld unlocked;
    status = orDeviceSynchronize();
  }
  OPENREG_CHECK(status);
}

void GeneratorImpl::set_current_seed(uint64_t seed) {
  waitForQueuedDraws();
  std::lock_guard<std::mutex> lock(engine_.mutex());
  engine_.set_current_seed(seed);
}

void GeneratorImpl::set_offset(uint64_t offset) {
  waitForQueuedDraws();
  std::lock_guard<std::mutex> lock(engine_.mutex());
  engine_.set_offset(offset);
}

uint64_t GeneratorImpl::get_offset() const {
  waitForQueuedDraws();
  std::lock_guard<std::mutex> lock(engine_.mutex());
  return engine_.get_offset();
}

uint64_t GeneratorImpl::current_seed() const {
  waitForQueuedDraws();
  std::lock_guard<std::mutex> lock(engine_.mutex());
  return engine_.current_seed();
}

uint64_t GeneratorImpl::seed() {
  waitForQueuedDraws();
  std::lock_guard<std::mutex> lock(engine_.mutex());
  return engine_.seed();
}

void GeneratorImpl::set_state(const c10::TensorImpl& state) {
  waitForQueuedDraws();
  std::lock_guard<std::mutex> lock(engine_.mutex());
  engine_.unsafeGetGeneratorImpl()->set_state(state);
}

c10::intrusive_ptr<c10::TensorImpl> GeneratorImpl::get_state() const {
  waitForQueuedDraws();
  std::lock_guard<std::mutex> lock(engine_.mutex());
  return engine_.unsafeGetGeneratorImpl()->get_state();
}

GeneratorImpl* GeneratorImpl::clone_impl() const {
  auto* copy = new GeneratorImpl(device().index());
  std::lock_guard<std::mutex> lock(engine_.mutex());
  copy->engine_ = engine_.clone();
  return copy;
}

const at::Generator& defaultGenerator(c10::DeviceIndex device) {
  static std::array<std::once_flag, OPENREG_MAX_DEVICES> once;
  static std::array<at::Generator, OPENREG_MAX_DEVICES> generators;
  device = resolveDevice(device);
  std::call_once(once[device], [device] {
    generators[device] = at::make_generator<GeneratorImpl>(device);
    generators[device].seed();  // non-deterministic until seeded, like CUDA
  });
  return generators[device];
}

at::Generator newGenerator(c10::DeviceIndex device) {
  return at::make_generator<GeneratorImpl>(resolveDevice(device));
}

at::Generator engineOf(const at::Generator& generator) {
  if (!generator.defined() || generator.device().type() != c10::DeviceType::PrivateUse1) {
    return generator;
  }
  return generator.get<GeneratorImpl>()->engine();
}

}  // namespace torch_openreg
