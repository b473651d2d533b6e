// stream_hold.cpp — torch_openreg._C._StreamHold: work that holds a stream
// until the test that queued it lets go (tests/_async.py's held_stream).
//
// A test of asynchronous behaviour needs work that is certainly still queued
// when it looks. A sleep on the stream is not certain — a busy machine can
// outlast it — and a hold is: it occupies the stream's worker until released,
// so everything queued behind it stays queued. The worker waits here, in C++,
// not in a Python function: it never needs the GIL, so a host that waits for
// the held work while holding the GIL (a bug) cannot also stop the hold from
// expiring. After its limit the hold lets the stream go and fails that work,
// so a broken test fails with a message instead of hanging.
#include "python/stream_hold.h"

#include <openreg.h>

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "base/device.h"
#include "base/runtime_check.h"
#include "integration/stream.h"

namespace py = pybind11;

namespace torch_openreg {
namespace {

class StreamHold {
 public:
  StreamHold(int64_t streamId, int device, double limitSeconds) {
    TORCH_CHECK_VALUE(std::isfinite(limitSeconds) && limitSeconds > 0,
                      "a stream hold needs a positive, finite limit in seconds, got ",
                      limitSeconds);
    const auto index = checkedDevice(static_cast<c10::DeviceIndex>(device));
    const c10::Stream stream(c10::Stream::UNSAFE, openregDevice(index), streamId);
    const auto limit = std::chrono::duration<double>(limitSeconds);
    OPENREG_CHECK(openreg::launchHostFunc(nativeHandle(stream),
                                          [state = state_, limit] { hold(*state, limit); }));
  }

  // Dropping the hold lets the stream go: nothing can release it any more.
  ~StreamHold() { release(); }
  StreamHold(const StreamHold&) = delete;
  StreamHold& operator=(const StreamHold&) = delete;

  void release() {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->released = true;
    }
    state_->changed.notify_all();
  }

  // True once the stream's worker runs the hold (everything before it has run).
  bool waitRunning(double seconds) {
    py::gil_scoped_release unlocked;
    std::unique_lock<std::mutex> lock(state_->mutex);
    return state_->changed.wait_for(lock, std::chrono::duration<double>(seconds),
                                    [this] { return state_->running; });
  }

  bool running() const { return read(&State::running); }
  bool released() const { return read(&State::released); }
  bool expired() const { return read(&State::expired); }

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable changed;
    bool running = false;
    bool released = false;
    bool expired = false;
  };

  // On the stream's worker.
  static void hold(State& state, std::chrono::duration<double> limit) {
    std::unique_lock<std::mutex> lock(state.mutex);
    state.running = true;
    state.changed.notify_all();
    if (state.changed.wait_for(lock, limit, [&state] { return state.released; })) return;
    state.expired = true;
    lock.unlock();
    const std::string message = c10::str(
        "a stream held by a test (tests/_async.py) was not released within ", limit.count(), " s");
    orSetKernelError(message.c_str());
  }

  bool read(bool State::* flag) const {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return (*state_).*flag;
  }

  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace

void bindStreamHold(py::module& m) {
  py::class_<StreamHold>(m, "_StreamHold",
                         "Test hook: work that holds an openreg stream until released "
                         "(tests/_async.py's held_stream).")
      .def(py::init<int64_t, int, double>(), py::arg("stream_id"), py::arg("device"),
           py::arg("limit_seconds"),
           "Queue the hold on the stream `stream_id` of `device`; it lets the stream go by "
           "itself after `limit_seconds`, failing that work.")
      .def("release", &StreamHold::release, "Let the held stream go on.")
      .def("wait_running", &StreamHold::waitRunning, py::arg("seconds"),
           "Wait up to `seconds` for the worker to reach the hold; whether it did.")
      .def_property_readonly("running", &StreamHold::running,
                             "Whether the worker has reached the hold.")
      .def_property_readonly("released", &StreamHold::released,
                             "Whether release() has been called.")
      .def_property_readonly("expired", &StreamHold::expired,
                             "Whether the hold let the stream go by itself (never released).");
}

}  // namespace torch_openreg
