// event.h — events for the device guard (torch.Event / torch.openreg.Event).
//
// c10 hands events around as opaque void*; here they are runtime orEvent_t
// handles, created lazily on first record on the recording stream's device.
#pragma once

#include <openreg.h>

#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace torch_openreg {

// Records on `stream`, creating the event in *event if it is still null.
void recordEvent(void** event, const c10::Stream& stream, c10::EventFlag flag);
// Makes later work on `stream` wait for the event's last record (no-op if null).
void blockStream(void* event, const c10::Stream& stream);
bool queryEvent(void* event);
void synchronizeEvent(void* event);
double elapsedMilliseconds(void* start, void* end);
void destroyEvent(void* event) noexcept;

// Puts `native` (owned from then on by `event`) into a c10::Event that has no
// native event yet, on `device`. A c10::Event creates its native event only
// through the guard's record, with timing as the only choice; this is how an
// interprocess event (orEventInterprocess), or one opened from another
// process's handle, becomes a torch.Event. Nothing is recorded. `native` is
// destroyed if it cannot be installed (the event already has one: raises).
void installNativeEvent(c10::Event& event, orEvent_t native, c10::DeviceIndex device);

}  // namespace torch_openreg
