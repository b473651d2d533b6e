"""Events: recording, query/synchronize, elapsed time, device rules."""

import pytest

import openreg_runtime as rt


def test_defaults():
    event = rt.Event()
    assert event.enable_timing is False
    assert event.handle != 0
    assert rt.Event(enable_timing=True).enable_timing is True


def test_never_recorded_event_is_complete():
    event = rt.Event()
    assert event.query() is True
    event.synchronize()


def test_record_query_synchronize(hold_stream):
    stream = rt.Stream()
    release = hold_stream(stream)
    event = rt.Event()
    event.record(stream)
    assert event.query() is False
    release()
    event.synchronize()
    assert event.query() is True
    assert stream.query() is True


def test_event_marks_a_point_not_the_end_of_the_stream(hold_stream):
    stream = rt.Stream()
    event = rt.Event()
    event.record(stream)
    release = hold_stream(stream)
    event.synchronize()
    assert event.query() is True
    assert stream.query() is False
    release()
    stream.synchronize()


def test_record_without_stream_uses_current_default_stream(hold_stream):
    release = hold_stream(rt.Stream.default())
    event = rt.Event()
    event.record()
    assert event.query() is False
    release()
    rt.Stream.default().synchronize()
    assert event.query() is True


def test_re_recording_tracks_the_latest_record(hold_stream):
    stream = rt.Stream()
    event = rt.Event()
    event.record(stream)
    stream.synchronize()
    assert event.query() is True
    release = hold_stream(stream)
    event.record(stream)
    assert event.query() is False
    release()
    event.synchronize()
    assert event.query() is True


def test_elapsed_time_brackets_work():
    stream = rt.Stream()
    start, end = rt.Event(enable_timing=True), rt.Event(enable_timing=True)
    start.record(stream)
    stream.sleep(0.05)
    end.record(stream)
    end.synchronize()
    milliseconds = start.elapsed_time(end)
    assert isinstance(milliseconds, float)
    assert milliseconds >= 40  # no upper bound: a busy machine may delay the worker


def test_elapsed_time_of_an_event_with_itself_is_zero():
    stream = rt.Stream()
    event = rt.Event(enable_timing=True)
    event.record(stream)
    stream.synchronize()
    assert event.elapsed_time(event) == 0.0


def test_elapsed_time_is_signed():
    stream = rt.Stream()
    start, end = rt.Event(enable_timing=True), rt.Event(enable_timing=True)
    start.record(stream)
    stream.sleep(0.02)
    end.record(stream)
    stream.synchronize()
    assert end.elapsed_time(start) == pytest.approx(-start.elapsed_time(end))
    assert end.elapsed_time(start) < 0


@pytest.mark.parametrize(
    ("start_timing", "end_timing", "role"),
    [(False, True, "start"), (True, False, "end"), (False, False, "start")],
)
def test_elapsed_time_needs_timing_events(start_timing, end_timing, role):
    stream = rt.Stream()
    start, end = rt.Event(enable_timing=start_timing), rt.Event(enable_timing=end_timing)
    start.record(stream)
    end.record(stream)
    stream.synchronize()
    with pytest.raises(rt.NotPermittedError, match=rf"^{role} event was created with") as info:
        start.elapsed_time(end)
    assert "orEventDisableTiming" in str(info.value)
    assert "[orErrorNotPermitted]" in str(info.value)


@pytest.mark.parametrize("role", ["start", "end"])
def test_elapsed_time_of_never_recorded_event_is_invalid_handle(role):
    stream = rt.Stream()
    recorded, unrecorded = rt.Event(enable_timing=True), rt.Event(enable_timing=True)
    recorded.record(stream)
    stream.synchronize()
    start, end = (unrecorded, recorded) if role == "start" else (recorded, unrecorded)
    with pytest.raises(rt.InvalidHandleError, match=rf"^{role} event was never recorded"):
        start.elapsed_time(end)


def test_elapsed_time_of_pending_end_event_is_not_ready(hold_stream):
    stream = rt.Stream()
    start, end = rt.Event(enable_timing=True), rt.Event(enable_timing=True)
    start.record(stream)
    start.synchronize()
    release = hold_stream(stream)
    stream.sleep(0.3)
    end.record(stream)
    with pytest.raises(rt.NotReadyError, match=r"^end event has not completed yet") as info:
        start.elapsed_time(end)
    assert "[orErrorNotReady]" in str(info.value)
    release()
    end.synchronize()
    assert start.elapsed_time(end) >= 250


def test_elapsed_time_of_pending_start_event_is_not_ready(hold_stream):
    stream, other = rt.Stream(), rt.Stream()
    start, end = rt.Event(enable_timing=True), rt.Event(enable_timing=True)
    end.record(other)
    end.synchronize()
    release = hold_stream(stream)
    start.record(stream)
    with pytest.raises(rt.NotReadyError, match=r"^start event has not completed yet"):
        start.elapsed_time(end)
    release()
    start.synchronize()
    assert start.elapsed_time(end) < 0


def test_recording_on_a_stream_of_another_device_is_device_mismatch():
    event = rt.Event(device=0)
    stream = rt.Stream(device=1)
    with pytest.raises(
        rt.DeviceMismatchError,
        match="event of device 0 cannot be recorded on a stream of device 1",
    ) as info:
        event.record(stream)
    assert "[orErrorDeviceMismatch]" in str(info.value)
    with pytest.raises(rt.DeviceMismatchError, match="event of device 0"):
        stream.record_event(event)
    assert event.query() is True, "the failed record left a record behind"


def test_event_device_follows_the_current_device():
    with rt.device(1):
        event = rt.Event()
    with pytest.raises(rt.DeviceMismatchError, match=r"event of device 1 .* device 0"):
        event.record()  # default stream of the current device, 0
    event.record(rt.Stream.default(device=1))
    event.synchronize()


def test_cross_device_wait_event_is_allowed(hold_stream):
    producer = rt.Stream(device=0)
    consumer = rt.Stream(device=1)
    state = {"done": False}
    observed = []
    release = hold_stream(producer)
    producer.launch(lambda: state.update(done=True))
    event = rt.Event(device=0)
    event.record(producer)
    consumer.wait_event(event)
    consumer.launch(lambda: observed.append(state["done"]))
    assert consumer.query() is False
    release()
    consumer.synchronize()
    assert observed == [True]


def test_event_synchronize_reports_failure_of_the_stream():
    stream = rt.Stream()
    stream.launch(lambda: (_ for _ in ()).throw(OSError("disk on fire")))
    event = stream.record_event()
    with pytest.raises(rt.LaunchFailureError, match="disk on fire"):
        event.synchronize()
    stream.synchronize()


def test_wait_uses_the_record_at_the_time_of_the_wait(hold_stream):
    producer, consumer = rt.Stream(), rt.Stream()
    event = rt.Event()
    event.record(producer)  # completes at once
    producer.synchronize()
    consumer.wait_event(event)
    release = hold_stream(producer)
    event.record(producer)  # a later record must not hold back the earlier wait
    consumer.synchronize()  # (would wait until the hold times out if it did)
    assert producer.query() is False
    release()
    producer.synchronize()


def test_elapsed_time_across_devices_is_refused():
    start = rt.Event(enable_timing=True, device=0)
    end = rt.Event(enable_timing=True, device=1)
    start.record(rt.Stream.default(0))
    end.record(rt.Stream.default(1))
    end.synchronize()
    start.synchronize()
    with pytest.raises(rt.DeviceMismatchError, match="devices 0 and 1 have no common clock"):
        start.elapsed_time(end)
