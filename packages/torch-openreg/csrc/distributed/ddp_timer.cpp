// ddp_timer.cpp — DistributedDataParallel's iteration timer for openreg.
//
// DDP marks the start of the forward pass, of the backward computation and of
// its communication in a c10d::Timer of the module's device type, and reports
// the differences in its logging data (avg_forward_compute_time, ...). Without
// a timer for the device, DDP warns and leaves them out. As CUDA's timer does,
// the marks are events recorded on the current stream, so they time the work
// on the device rather than the host's launches; reading a difference waits
// for both events.
#include <c10/core/Event.h>
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

#include <array>

#include "integration/stream.h"

namespace c10d {
namespace {

class OpenRegTimer final : public Timer {
 public:
  explicit OpenRegTimer(c10::Device device) : device_(device) {}

  void record(Event event) override {
    Timer::record(event);  // the host-side timestamp as well
    eventFor(event).record(torch_openreg::currentStream(device_.index()));
  }

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    c10::Event& first = eventFor(start);
    c10::Event& last = eventFor(end);
    if (!first.was_marked_for_recording() || !last.was_marked_for_recording()) {
      return std::nullopt;
    }
    first.synchronize();
    last.synchronize();
    const double milliseconds = first.elapsedTime(last);
    if (milliseconds < 0) return std::nullopt;  // recorded in the other order
    return static_cast<int64_t>(milliseconds * 1e6);
  }

 private:
  static c10::Event timingEvent() {
    return c10::Event(c10::DeviceType::PrivateUse1, c10::EventFlag::BACKEND_DEFAULT);
  }

  c10::Event& eventFor(Event event) { return events_.at(static_cast<size_t>(event)); }

  const c10::Device device_;
  std::array<c10::Event, 5> events_{timingEvent(), timingEvent(), timingEvent(), timingEvent(),
                                    timingEvent()};
};

C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, OpenRegTimer);

}  // namespace
}  // namespace c10d
