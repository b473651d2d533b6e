// api_stream.cpp — C entry points for streams and host-function launches.
#include <optional>

#include "chaos.h"
#include "errors.h"
#include "fault_injection.h"
#include "runtime.h"

using namespace openreg::runtime;

namespace {

constexpr int kLeastPriority = 0;
constexpr int kGreatestPriority = -2;

orStream_t createStream(unsigned int flags, int priority) {
  check(flags == orStreamDefault || flags == orStreamNonBlocking, orErrorInvalidValue,
        "stream flags ", flags, " are not orStreamDefault or orStreamNonBlocking");
  check(priority <= kLeastPriority && priority >= kGreatestPriority, orErrorInvalidValue,
        "stream priority ", priority, " is outside [", kGreatestPriority, ", ", kLeastPriority,
        "] (see orDeviceGetStreamPriorityRange)");
  Runtime& runtime = Runtime::instance();
  Device& device = runtime.currentDevice();
  auto stream = std::make_shared<Stream>(device.index(), priority, flags, false);
  device.trackStream(stream);
  return static_cast<orStream_t>(runtime.streams().add(std::move(stream)));
}

}  // namespace

extern "C" {

orError_t orDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  return runApi([&] {
    if (leastPriority != nullptr) *leastPriority = kLeastPriority;
    if (greatestPriority != nullptr) *greatestPriority = kGreatestPriority;
  });
}

orError_t orStreamCreate(orStream_t* stream) {
  return runApi([&] {
    checkNotNull(stream, "stream");
    *stream = createStream(orStreamDefault, kLeastPriority);
  });
}

orError_t orStreamCreateWithPriority(orStream_t* stream, unsigned int flags, int priority) {
  return runApi([&] {
    checkNotNull(stream, "stream");
    *stream = createStream(flags, priority);
  });
}

orError_t orStreamDestroy(orStream_t stream) {
  return runApi([&] {
    check(stream != nullptr, orErrorInvalidResourceHandle,
          "the default stream (NULL) cannot be destroyed");
    Runtime& runtime = Runtime::instance();
    check(!runtime.streams().get(stream)->isDefault(), orErrorInvalidResourceHandle,
          "a device's default stream cannot be destroyed");
    runtime.streams().remove(stream)->close();
  });
}

orError_t orStreamQuery(orStream_t stream) {
  return runApi([&] {
    std::shared_ptr<Stream> target = Runtime::instance().resolveStream(stream);
    // One reading of idle, taken before the failure: work records its failure before
    // it counts as completed, so a stream seen idle has no failure still to come. Read
    // after it, the last work could fail in between and the query report success.
    const bool idle = target->idle();
    throwPendingFailure(*target);
    if (idle) return;
    if (chaos::enabled()) target->noteDemand(target->lastEnqueued());
    target->ring();  // asked about: queued work starts now (see stream.h)
    fail(orErrorNotReady, "work on the stream has not completed yet");
  });
}

orError_t orStreamSynchronize(orStream_t stream) {
  return runApi([&] {
    std::shared_ptr<Stream> target = Runtime::instance().resolveStream(stream);
    refuseInsideStreamWork("orStreamSynchronize");
    synchronizeOrThrow(*target);
    pendingReleases().releaseCompleted();
  });
}

orError_t orStreamWaitEvent(orStream_t stream, orEvent_t event, unsigned int flags) {
  return runApi([&] {
    check(flags == 0, orErrorInvalidValue, "orStreamWaitEvent flags must be 0, got ", flags);
    Runtime& runtime = Runtime::instance();
    std::shared_ptr<Stream> waiter = runtime.resolveStream(stream);
    std::shared_ptr<Event> target = runtime.events().get(event);
    if (const auto& imported = target->imported()) {
      // Another process's record: the waiting work blocks this stream until
      // it completes there, or fails if that process exits first.
      const uint64_t latest = imported->latestRecord();
      if (imported->hasCompleted(latest)) return;
      waiter->enqueue([imported, latest] { imported->waitFor(latest); });
      return;
    }
    std::shared_ptr<Event::Record> record = target->latest();
    if (!record) return;  // never recorded: nothing to wait for, as in CUDA
    waiter->enqueue([record] { record->stream->waitFor(record->sequence); });
  });
}

orError_t orStreamGetPriority(orStream_t stream, int* priority) {
  return runApi([&] {
    checkNotNull(priority, "priority");
    *priority = Runtime::instance().resolveStream(stream)->priority();
  });
}

orError_t orStreamGetDevice(orStream_t stream, int* device) {
  return runApi([&] {
    checkNotNull(device, "device");
    *device = Runtime::instance().resolveStream(stream)->device();
  });
}

orError_t orStreamGetProgress(orStream_t stream, unsigned long long* enqueued,
                              unsigned long long* completed) {
  return runApi([&] {
    std::shared_ptr<Stream> target = Runtime::instance().resolveStream(stream);
    // Completed first: read the other way round, work enqueued and finished
    // between the two reads could show more completed than enqueued.
    const uint64_t done = target->completed();
    if (completed != nullptr) *completed = done;
    if (enqueued != nullptr) *enqueued = target->lastEnqueued();
  });
}

orError_t orStreamGetDefault(orStream_t* stream) {
  return runApi([&] {
    checkNotNull(stream, "stream");
    *stream =
        reinterpret_cast<orStream_t>(Runtime::instance().currentDevice().defaultStream().get());
  });
}

orError_t orLaunchHostFunc(orStream_t stream, orHostFn_t fn, void* userData) {
  return runApi([&] {
    check(fn != nullptr, orErrorInvalidValue, "orLaunchHostFunc: fn must not be NULL");
    std::shared_ptr<Stream> target = Runtime::instance().resolveStream(stream);
    std::optional<uint64_t> injected = injectedFault(FaultKind::Launch);
    if (!injected) {
      target->enqueue([fn, userData] { fn(userData); });
      return;
    }
    // The function still runs: it owns userData and may have to release it.
    // Then the work fails, as when a device reports a kernel that faulted.
    target->enqueue([fn, userData, message = injectedFaultMessage(FaultKind::Launch, *injected)] {
      fn(userData);
      reportFailureOfCurrentWork(message);
    });
  });
}

orError_t orSetKernelError(const char* message) {
  return runApi([&] {
    checkNotNull(message, "message");
    check(reportFailureOfCurrentWork(message), orErrorNotPermitted,
          "orSetKernelError may only be called from work running on an OpenReg stream");
  });
}

}  // extern "C"
