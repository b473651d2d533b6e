// event.cpp — guard event operations over orEvent_t.
#include "integration/event.h"

#include <c10/util/Exception.h>

#include <utility>

#include "base/debug_modes.h"
#include "base/device.h"
#include "base/runtime_check.h"
#include "base/stream_capture.h"
#include "integration/stream.h"

namespace torch_openreg {
namespace {
orEvent_t asEvent(void* event) { return static_cast<orEvent_t>(event); }

// The native event installNativeEvent hands to the next recordEvent of this thread.
thread_local orEvent_t eventToInstall = nullptr;
}  // namespace

void recordEvent(void** event, const c10::Stream& stream, c10::EventFlag flag) {
  if (eventToInstall != nullptr) {
    TORCH_CHECK(*event == nullptr, "this torch.Event already has a native event");
    *event = std::exchange(eventToInstall, nullptr);
    return;
  }
  if (*event == nullptr) {
    DeviceScope scope(stream.device_index());
    // As in CUDA, BACKEND_DEFAULT events time; PYTORCH_DEFAULT ones do not.
    const unsigned flags =
        flag == c10::EventFlag::BACKEND_DEFAULT ? orEventDefault : orEventDisableTiming;
    orEvent_t created = nullptr;
    OPENREG_CHECK(orEventCreateWithFlags(&created, flags));
    *event = created;
  }
  // On a capturing stream the event marks the capture's point instead.
  if (recordEventInCapture(*event, stream, nativeHandle(stream))) return;
  OPENREG_CHECK(orEventRecord(asEvent(*event), nativeHandle(stream)));
  notifyStreamOrder(&StreamOrderObserver::eventRecorded, *event, stream);
}

void blockStream(void* event, const c10::Stream& stream) {
  if (event == nullptr) return;
  // A wait for a captured point joins the capture (a fork) or orders within it.
  if (waitEventInCapture(event, stream, nativeHandle(stream))) return;
  OPENREG_CHECK(orStreamWaitEvent(nativeHandle(stream), asEvent(event), 0));
  notifyStreamOrder(&StreamOrderObserver::streamWaitedForEvent, stream, event);
}

bool queryEvent(void* event) {
  if (event == nullptr) return true;
  checkEventWait(event, "Event.query()");
  const bool done = completed(orEventQuery(asEvent(event)));
  if (done) notifyStreamOrder(&StreamOrderObserver::eventSynchronized, event);
  return done;
}

void synchronizeEvent(void* event) {
  if (event == nullptr) return;
  checkEventWait(event, "Event.synchronize()");
  OPENREG_CHECK(orEventSynchronize(asEvent(event)));
  notifyStreamOrder(&StreamOrderObserver::eventSynchronized, event);
}

double elapsedMilliseconds(void* start, void* end) {
  TORCH_CHECK(start != nullptr && end != nullptr,
              "Both events must be recorded before calculating elapsed time.");
  checkEventWait(start, "Event.elapsed_time()");
  checkEventWait(end, "Event.elapsed_time()");
  float milliseconds = 0;
  OPENREG_CHECK(orEventElapsedTime(&milliseconds, asEvent(start), asEvent(end)));
  return milliseconds;
}

void installNativeEvent(c10::Event& event, orEvent_t native, c10::DeviceIndex device) {
  if (event.eventId() != nullptr) {
    succeeded(orEventDestroy(native));
    TORCH_CHECK(false, "this torch.Event already has a native event");
  }
  eventToInstall = native;
  try {
    // c10::Event::record calls the guard's record (recordEvent above), which
    // installs the event instead of recording; it also sets the event's device.
    event.record(currentStream(device));
  } catch (...) {
    if (eventToInstall != nullptr)
      succeeded(orEventDestroy(std::exchange(eventToInstall, nullptr)));
    throw;
  }
}

void destroyEvent(void* event) noexcept {
  if (event == nullptr) return;
  forgetEvent(event);
  notifyStreamOrder(&StreamOrderObserver::eventDestroyed, event);
  succeeded(orEventDestroy(asEvent(event)));
}

}  // namespace torch_openreg
