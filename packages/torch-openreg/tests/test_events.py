"""Events of the openreg device: torch.openreg.Event (mirroring torch.cuda.Event)
and the generic torch.Event: record, query, synchronize, wait, elapsed_time,
and waiting on events of another stream or another device.

Pending work is queued behind a held stream (``held_stream``), which keeps it
queued until the test releases the hold; a wait is checked with ``release_soon``,
which releases the hold once the host blocks. Elapsed times are measured on
``torch.openreg._sleep`` (a kernel of known duration, like ``torch.cuda._sleep``).
"""

from __future__ import annotations

import pytest
import torch
from _async import held_stream

import torch_openreg  # noqa: F401  (registers the device)

# Upper bound of the elapsed times measured below, in milliseconds: it checks the
# unit (microseconds would be 1000 times more), leaving a busy machine all the slack.
ELAPSED_BOUND_MS = 5000


# --- record / query / synchronize ---------------------------------------------------------


def test_never_recorded_event_is_complete():
    event = torch.openreg.Event()
    assert isinstance(event, torch.Event)
    assert event.device.type == "openreg"
    assert event.query() is True
    event.synchronize()  # returns at once
    assert torch.openreg.Event(enable_timing=True).query() is True


def test_query_follows_recorded_work():
    event = torch.openreg.Event()
    with held_stream():
        event.record()
        assert event.device == torch.device("openreg:0")
        assert event.query() is False
    torch.openreg.current_stream().synchronize()
    assert event.query() is True


def test_event_synchronize_waits_for_recorded_work_only():
    stream = torch.openreg.Stream()
    event = torch.openreg.Event()
    with held_stream(stream) as before:
        with torch.openreg.stream(stream):
            event.record()
        with held_stream(stream):  # after the event: not waited for
            before.release_soon()
            event.synchronize()
            assert before.released  # it waited for the work before the record
            assert event.query() is True
            assert stream.query() is False
    stream.synchronize()


def test_record_on_explicit_stream():
    stream = torch.openreg.Stream(device=1)
    with held_stream(stream) as held:
        event = torch.openreg.Event()
        event.record(stream)
        assert event.device == torch.device("openreg:1")
        assert event.query() is False
        held.release_soon()
        event.synchronize()
        assert held.released
    assert stream.query() is True


def test_stream_record_event_returns_an_event():
    stream = torch.openreg.Stream()
    with held_stream(stream):
        event = stream.record_event()
        assert isinstance(event, torch.openreg.Event)
        assert event.query() is False
        given = torch.openreg.Event(enable_timing=True)
        assert stream.record_event(given) is given
    stream.synchronize()
    assert event.query() is True
    assert given.query() is True
    generic = torch.Stream(device="openreg").record_event()
    assert isinstance(generic, torch.Event)
    generic.synchronize()


def test_rerecording_does_not_disturb_a_waiter_on_the_older_record():
    slow, idle, waiter = torch.openreg.Stream(), torch.openreg.Stream(), torch.openreg.Stream()
    event = torch.openreg.Event()
    with held_stream(slow):
        event.record(slow)
        waiter.wait_event(event)
        event.record(idle)  # new record on an idle stream: completes at once
        event.synchronize()
        assert event.query() is True
        assert waiter.query() is False  # still waiting for the old record
    waiter.synchronize()
    assert slow.query() is True


# --- wait ---------------------------------------------------------------------------------


def test_wait_makes_a_stream_wait_for_the_recorded_work():
    producer, consumer = torch.openreg.Stream(), torch.openreg.Stream()
    data = torch.zeros(32, device="openreg")
    torch.openreg.synchronize()  # the producer uses it (found by OPENREG_DEBUG=races)
    with torch.openreg.stream(producer):
        data.add_(1)
        torch.openreg.synchronize()  # first call of the signature ran; now asynchronous
        data.zero_()
    with held_stream(producer):
        with torch.openreg.stream(producer):
            data.add_(7)
        event = torch.openreg.Event()
        event.record(producer)
        event.wait(consumer)
        assert consumer.query() is False
        pinned = torch.empty(32).pin_memory()
        with torch.openreg.stream(consumer):
            pinned.copy_(data, non_blocking=True)
    consumer.synchronize()
    torch.testing.assert_close(pinned, torch.full((32,), 7.0), rtol=0, atol=0)


def test_wait_without_stream_uses_current_stream():
    producer = torch.openreg.Stream()
    with held_stream(producer):
        event = producer.record_event()
        event.wait()
        assert torch.openreg.current_stream().query() is False
    torch.openreg.current_stream().synchronize()
    assert producer.query() is True


def test_waiting_on_a_never_recorded_event_does_not_block():
    stream = torch.openreg.Stream()
    torch.openreg.Event().wait(stream)
    stream.wait_event(torch.openreg.Event())
    stream.synchronize()
    assert stream.query() is True


def test_event_of_device_one_waited_on_by_device_zero_stream():
    on_one = torch.openreg.Stream(device=1)
    on_zero = torch.openreg.Stream(device=0)
    with held_stream(on_one) as held:
        with torch.openreg.stream(on_one):
            event = on_one.record_event()
        assert event.device == torch.device("openreg:1")
        on_zero.wait_event(event)
        assert on_zero.query() is False
        held.release_soon()
        on_zero.synchronize()
        assert held.released  # device 0's stream waited for device 1's work
    assert event.query() is True
    assert on_one.query() is True


def test_event_of_device_one_orders_data_read_on_device_zero():
    source = torch.zeros(16, device="openreg:1")
    torch.openreg.synchronize(1)  # on_one uses it (found by OPENREG_DEBUG=races)
    on_one = torch.openreg.Stream(device=1)
    with torch.openreg.stream(on_one):
        source.add_(1)
        on_one.synchronize()
        source.zero_()
    with held_stream(on_one) as held:
        with torch.openreg.stream(on_one):
            source.add_(3)
            event = on_one.record_event()
        on_zero = torch.openreg.Stream(device=0)
        event.wait(on_zero)
        # A device-0 stream waiting on the event, then a host read ordered after it.
        done = on_zero.record_event()
        held.release_soon()
        done.synchronize()
        assert held.released
    assert on_one.query() is True
    pinned = torch.empty(16).pin_memory()
    pinned.copy_(source, non_blocking=True)
    torch.openreg.synchronize(1)
    torch.testing.assert_close(pinned, torch.full((16,), 3.0), rtol=0, atol=0)


# --- elapsed_time -------------------------------------------------------------------------


def test_elapsed_time_brackets_known_work():
    start = torch.openreg.Event(enable_timing=True)
    end = torch.openreg.Event(enable_timing=True)
    start.record()
    torch.openreg._sleep(50)
    end.record()
    end.synchronize()
    elapsed = start.elapsed_time(end)
    assert isinstance(elapsed, float)
    assert 40 <= elapsed <= ELAPSED_BOUND_MS
    assert end.elapsed_time(start) == pytest.approx(-elapsed)


def test_elapsed_time_grows_with_the_work():
    events = [torch.openreg.Event(enable_timing=True) for _ in range(3)]
    events[0].record()
    torch.openreg._sleep(20)
    events[1].record()
    torch.openreg._sleep(250)  # far apart: a stalled worker cannot make ``short`` the longer
    events[2].record()
    events[2].synchronize()
    short = events[0].elapsed_time(events[1])
    long = events[1].elapsed_time(events[2])
    assert 15 <= short <= ELAPSED_BOUND_MS
    assert 240 <= long <= ELAPSED_BOUND_MS
    assert long > short


def test_elapsed_time_between_two_streams():
    slow, fast = torch.openreg.Stream(), torch.openreg.Stream()
    start = torch.openreg.Event(enable_timing=True)
    end = torch.openreg.Event(enable_timing=True)
    start.record(fast)  # idle stream: reached at once
    # The sleep starts after ``start`` was reached, however late ``fast``'s worker runs.
    slow.wait_event(start)
    with torch.openreg.stream(slow):
        torch.openreg._sleep(100)
    end.record(slow)  # reached after the sleep
    end.synchronize()
    start.synchronize()
    assert 80 <= start.elapsed_time(end) <= ELAPSED_BOUND_MS


def test_elapsed_time_with_generic_torch_event():
    start = torch.Event(device="openreg", enable_timing=True)
    end = torch.Event(device="openreg", enable_timing=True)
    start.record()
    torch.openreg._sleep(50)
    end.record()
    end.synchronize()
    assert 40 <= start.elapsed_time(end) <= ELAPSED_BOUND_MS


def test_elapsed_time_between_generic_and_openreg_events():
    start = torch.openreg.Event(enable_timing=True)
    end = torch.Event(device="openreg", enable_timing=True)
    start.record()
    torch.openreg._sleep(50)
    end.record()
    end.synchronize()
    assert 40 <= start.elapsed_time(end) <= ELAPSED_BOUND_MS


def test_elapsed_time_on_non_timing_events_raises():
    start, end = torch.openreg.Event(), torch.openreg.Event()
    start.record()
    end.record()
    end.synchronize()
    with pytest.raises(RuntimeError, match="timing"):
        start.elapsed_time(end)
    timed = torch.openreg.Event(enable_timing=True)
    timed.record()
    timed.synchronize()
    with pytest.raises(RuntimeError, match="timing"):
        timed.elapsed_time(end)


def test_elapsed_time_on_generic_non_timing_events_raises():
    start, end = torch.Event(device="openreg"), torch.Event(device="openreg")
    start.record()
    end.record()
    end.synchronize()
    with pytest.raises(ValueError, match="enable_timing"):
        start.elapsed_time(end)


def test_elapsed_time_of_unrecorded_events_raises():
    start = torch.openreg.Event(enable_timing=True)
    end = torch.openreg.Event(enable_timing=True)
    with pytest.raises(RuntimeError, match="recorded"):
        start.elapsed_time(end)


def test_elapsed_time_before_completion_raises_not_ready():
    start = torch.openreg.Event(enable_timing=True)
    end = torch.openreg.Event(enable_timing=True)
    with held_stream():
        start.record()
        end.record()
        # As cudaEventElapsedTime: not ready while the events' work is pending.
        with pytest.raises(RuntimeError, match="not completed"):
            start.elapsed_time(end)
    end.synchronize()
    assert 0 <= start.elapsed_time(end) <= ELAPSED_BOUND_MS


# --- torch.Event --------------------------------------------------------------------------


def test_generic_torch_event_on_openreg():
    event = torch.Event(device="openreg")
    assert event.device.type == "openreg"
    assert event.query() is True
    with held_stream() as held:
        event.record()
        assert event.device == torch.device("openreg:0")
        assert event.query() is False
        held.release_soon()
        event.synchronize()
        assert held.released
    assert event.query() is True


def test_generic_torch_event_wait_orders_streams():
    producer, consumer = torch.Stream(device="openreg"), torch.Stream(device="openreg")
    event = torch.Event(device="openreg")
    with held_stream(producer) as held:
        event.record(producer)
        event.wait(consumer)
        assert consumer.query() is False
        held.release_soon()
        consumer.synchronize()
        assert held.released
    assert producer.query() is True


def test_elapsed_time_across_devices_is_refused():
    start = torch.openreg.Event(enable_timing=True)
    end = torch.openreg.Event(enable_timing=True)
    start.record(torch.openreg.current_stream(0))
    end.record(torch.openreg.current_stream(1))
    end.synchronize()
    start.synchronize()
    with pytest.raises(RuntimeError, match="no common clock"):
        start.elapsed_time(end)
