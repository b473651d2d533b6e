// api_event.cpp — C entry points for events.
#include <chrono>

#include "chaos.h"
#include "errors.h"
#include "runtime.h"

using namespace openreg::runtime;

namespace {

std::shared_ptr<Event::Record> completedTimingRecord(orEvent_t handle, const char* role) {
  std::shared_ptr<Event> event = Runtime::instance().events().get(handle);
  check(event->timing(), orErrorNotPermitted, role,
        " event was created with orEventDisableTiming; create it with timing to measure time");
  std::shared_ptr<Event::Record> record = event->latest();
  check(record != nullptr, orErrorInvalidResourceHandle, role, " event was never recorded");
  record->stream->ring();
  check(record->stream->isComplete(record->sequence), orErrorNotReady, role,
        " event has not completed yet");
  return record;
}

}  // namespace

extern "C" {

orError_t orEventCreate(orEvent_t* event) { return orEventCreateWithFlags(event, orEventDefault); }

orError_t orEventCreateWithFlags(orEvent_t* event, unsigned int flags) {
  return runApi([&] {
    checkNotNull(event, "event");
    check((flags & ~(orEventDisableTiming | orEventInterprocess)) == 0, orErrorInvalidValue,
          "event flags ", flags,
          " contain unsupported bits (orEventDisableTiming and orEventInterprocess are supported)");
    const bool interprocess = (flags & orEventInterprocess) != 0;
    const bool timing = (flags & orEventDisableTiming) == 0;
    check(!(interprocess && timing), orErrorInvalidValue,
          "an interprocess event cannot time: create it with orEventInterprocess | "
          "orEventDisableTiming, as with CUDA");
    Runtime& runtime = Runtime::instance();
    const int device = runtime.currentDevice().index();
    auto created = std::make_shared<Event>(device, timing,
                                           interprocess ? ExportedEvent::create(device) : nullptr);
    *event = static_cast<orEvent_t>(runtime.events().add(std::move(created)));
  });
}

orError_t orEventRecord(orEvent_t event, orStream_t stream) {
  return runApi([&] {
    Runtime& runtime = Runtime::instance();
    std::shared_ptr<Event> target = runtime.events().get(event);
    check(!target->imported(), orErrorNotPermitted,
          "an event imported from another process (orIpcOpenEventHandle) cannot be recorded "
          "here: record it in the process that created it");
    std::shared_ptr<Stream> on = runtime.resolveStream(stream);
    check(on->device() == target->device(), orErrorDeviceMismatch, "event of device ",
          target->device(), " cannot be recorded on a stream of device ", on->device());
    target->record(on);
  });
}

orError_t orEventQuery(orEvent_t event) {
  return runApi([&] {
    std::shared_ptr<Event> target = Runtime::instance().events().get(event);
    if (target->imported()) return target->imported()->query();
    std::shared_ptr<Event::Record> record = target->latest();
    if (!record) return;
    if (chaos::enabled()) record->stream->noteDemand(record->sequence);
    record->stream->ring();
    check(record->stream->isComplete(record->sequence), orErrorNotReady,
          "the event's work has not completed yet");
  });
}

orError_t orEventSynchronize(orEvent_t event) {
  return runApi([&] {
    std::shared_ptr<Event> target = Runtime::instance().events().get(event);
    refuseInsideStreamWork("orEventSynchronize");
    if (const auto& imported = target->imported())
      return imported->waitFor(imported->latestRecord());
    std::shared_ptr<Event::Record> record = target->latest();
    if (!record) return;
    record->stream->waitFor(record->sequence);
    throwPendingFailure(*record->stream);
    pendingReleases().releaseCompleted();
  });
}

orError_t orEventElapsedTime(float* ms, orEvent_t start, orEvent_t end) {
  return runApi([&] {
    checkNotNull(ms, "ms");
    auto startRecord = completedTimingRecord(start, "start");
    auto endRecord = completedTimingRecord(end, "end");
    check(startRecord->stream->device() == endRecord->stream->device(), orErrorDeviceMismatch,
          "events recorded on devices ", startRecord->stream->device(), " and ",
          endRecord->stream->device(), " have no common clock: time events of one device");
    std::chrono::duration<float, std::milli> elapsed =
        endRecord->reachedAt - startRecord->reachedAt;
    *ms = elapsed.count();
  });
}

orError_t orEventDestroy(orEvent_t event) {
  return runApi([&] { Runtime::instance().events().remove(event); });
}

}  // extern "C"
