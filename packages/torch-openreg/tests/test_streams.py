"""Streams of the openreg device: the torch.openreg stream API (mirroring
torch.cuda), the generic torch.Stream / torch.accelerator surface, and the
ordering guarantees of stream execution.

Ordering is observed behind a held stream (``held_stream``): work enqueued
behind the hold is still pending when the test looks, however slowly the
machine runs, so a missing wait is visible as stale data or ``query() is
False``; a wait is checked with ``release_soon``, which releases the hold once
the host blocks. Every operator signature a test relies on being asynchronous
is run once beforehand, because the first call of a new signature runs
synchronously (plan verification).
"""

from __future__ import annotations

import threading

import pytest
import torch
from _async import HeldStream, held_stream, warm

import torch_openreg  # registers the device; _C has the stream hold

STREAMS_PER_PRIORITY = 32


def read_now(tensor: torch.Tensor, stream: torch.Stream) -> torch.Tensor:
    """``tensor``'s contents as ``stream`` sees them now (other streams' pending work not awaited).

    A non-blocking copy into pinned memory on ``stream``, waiting only for ``stream``.
    """
    pinned = torch.empty(tensor.shape, dtype=tensor.dtype).pin_memory()
    with torch.openreg.stream(stream):
        pinned.copy_(tensor, non_blocking=True)
    stream.synchronize()
    return pinned


# --- construction, ids, priorities --------------------------------------------------------


@pytest.mark.parametrize(
    ("priority", "ids"), [(0, range(1, 33)), (-1, range(33, 65)), (-2, range(65, 97))]
)
def test_stream_priority_id_and_device(priority, ids):
    stream = torch.openreg.Stream(priority=priority)
    assert isinstance(stream, torch.openreg.Stream)
    assert isinstance(stream, torch.Stream)
    assert stream.priority == priority
    assert stream.stream_id in ids
    assert stream.device == torch.device("openreg:0")
    assert stream.device_index == 0
    assert stream.device_type == torch.openreg.default_stream().device_type


def test_stream_on_explicit_device():
    for device in (1, "openreg:1", torch.device("openreg", 1)):
        stream = torch.openreg.Stream(device=device, priority=-1)
        assert stream.device == torch.device("openreg:1")
        assert stream.priority == -1
    with torch.openreg.device(1):
        assert torch.openreg.Stream().device_index == 1


def test_priority_range():
    assert torch.openreg.Stream.priority_range() == (0, -2)
    least, greatest = torch.openreg.Stream.priority_range()
    assert greatest < least  # lower number = higher priority, as in CUDA


@pytest.mark.parametrize(("requested", "clamped"), [(1, 0), (5, 0), (-3, -2), (-100, -2)])
def test_out_of_range_priority_is_clamped(requested, clamped):
    # As torch.cuda.Stream: priorities outside priority_range() are clamped to it.
    stream = torch.openreg.Stream(priority=requested)
    assert stream.priority == clamped
    generic = torch.Stream(device="openreg", priority=requested)
    assert torch.openreg.streams._wrap(generic).priority == clamped


def test_stream_of_non_openreg_device_is_rejected():
    with pytest.raises(ValueError, match="Expected an openreg device"):
        torch.openreg.Stream(device="cpu")


def test_same_id_on_two_devices_are_different_streams():
    on_zero = torch.openreg.Stream(device=0)
    on_one = torch.openreg.streams._wrap(
        torch.Stream(stream_id=on_zero.stream_id, device_index=1, device_type=on_zero.device_type)
    )
    assert on_zero != on_one
    with held_stream(on_zero):
        assert on_zero.query() is False
        assert on_one.query() is True
    on_zero.synchronize()


def test_pool_streams_are_distinct_from_default():
    streams = {torch.openreg.Stream().stream_id for _ in range(STREAMS_PER_PRIORITY)}
    assert 0 not in streams
    assert len(streams) == STREAMS_PER_PRIORITY  # round-robin over the whole pool


# --- default / current stream, set_stream, contexts ---------------------------------------


@pytest.mark.parametrize("device", [0, 1])
def test_default_stream_is_current_until_set(device):
    default = torch.openreg.default_stream(device)
    assert default.stream_id == 0
    assert default.device == torch.device(f"openreg:{device}")
    assert default.priority == 0
    assert torch.openreg.current_stream(device) == default
    assert isinstance(torch.openreg.current_stream(device), torch.openreg.Stream)


def test_set_stream_changes_current_not_default():
    stream = torch.openreg.Stream()
    torch.openreg.set_stream(stream)
    assert torch.openreg.current_stream() == stream
    assert torch.openreg.default_stream().stream_id == 0
    assert torch.openreg.current_stream(1).stream_id == 0
    # Work now runs on the new stream: pending work there is visible on it only.
    with held_stream():
        assert stream.query() is False
        assert torch.openreg.default_stream().query() is True
    stream.synchronize()


def test_set_stream_of_other_device_makes_that_device_current():
    stream = torch.openreg.Stream(device=1)
    torch.openreg.set_stream(stream)
    assert torch.openreg.current_device() == 1
    assert torch.openreg.current_stream() == stream
    assert torch.openreg.current_stream(0).stream_id == 0


def test_stream_context_sets_and_restores_stream():
    stream = torch.openreg.Stream()
    with torch.openreg.stream(stream) as entered:
        assert entered is stream
        assert torch.openreg.current_stream() == stream
        assert torch.accelerator.current_stream() == stream
        result = torch.arange(4.0, device="openreg") * 2
    assert torch.openreg.current_stream().stream_id == 0
    stream.synchronize()  # result was computed on ``stream``, not the now-current one
    torch.testing.assert_close(result.cpu(), torch.arange(4.0) * 2, rtol=0, atol=0)


def test_stream_context_restores_previous_non_default_stream():
    outer, inner = torch.openreg.Stream(), torch.openreg.Stream(priority=-1)
    torch.openreg.set_stream(outer)
    with torch.openreg.stream(inner):
        assert torch.openreg.current_stream() == inner
    assert torch.openreg.current_stream() == outer


def test_stream_context_of_device_one_makes_device_one_current():
    stream = torch.openreg.Stream(device=1)
    with torch.openreg.stream(stream):
        assert torch.openreg.current_device() == 1
        assert torch.openreg.current_stream() == stream
        assert torch.openreg.current_stream(0).stream_id == 0
        tensor = torch.ones(2, device="openreg")
        assert tensor.device == torch.device("openreg:1")
    assert torch.openreg.current_device() == 0
    assert torch.openreg.current_stream(1).stream_id == 0


def test_stream_context_restores_after_exception():
    stream = torch.openreg.Stream(device=1)
    with pytest.raises(KeyError), torch.openreg.stream(stream):
        raise KeyError("inside")
    assert torch.openreg.current_device() == 0
    assert torch.openreg.current_stream(1).stream_id == 0


def test_stream_context_none_is_a_no_op():
    before = torch.openreg.current_stream()
    with torch.openreg.stream(None) as entered:
        assert entered is None
        assert torch.openreg.current_stream() == before
    assert torch.openreg.current_stream() == before


def test_stream_object_is_a_context_manager():
    stream = torch.openreg.Stream(device=1)
    with stream:
        assert torch.openreg.current_device() == 1
        assert torch.openreg.current_stream(1) == stream
    assert torch.openreg.current_device() == 0
    assert torch.openreg.current_stream(1).stream_id == 0
    generic = torch.Stream(device="openreg")
    with generic:
        assert torch.openreg.current_stream() == generic
    assert torch.openreg.current_stream().stream_id == 0


def test_current_stream_is_per_thread():
    stream = torch.openreg.Stream()
    torch.openreg.set_stream(stream)
    seen: dict[str, torch.Stream] = {}

    def other_thread() -> None:
        seen["before"] = torch.openreg.current_stream()
        own = torch.openreg.Stream(priority=-2)
        torch.openreg.set_stream(own)
        seen["own"] = own
        seen["after"] = torch.openreg.current_stream()

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert seen["before"] == torch.openreg.default_stream()
    assert seen["after"] == seen["own"]
    assert torch.openreg.current_stream() == stream  # untouched by the other thread


def test_work_from_another_thread_runs_on_that_threads_stream():
    stream = torch.openreg.Stream()
    torch.openreg.set_stream(stream)
    holds: list[HeldStream] = []
    thread = threading.Thread(
        target=lambda: holds.append(HeldStream(torch.openreg.current_stream()))
    )
    thread.start()
    thread.join()
    # The other thread's current stream is the default stream, not ``stream``.
    try:
        assert torch.openreg.default_stream().query() is False
        assert stream.query() is True
    finally:
        holds[0].close()
    torch.openreg.default_stream().synchronize()


# --- torch.Stream and torch.accelerator ---------------------------------------------------


def test_generic_torch_stream_on_openreg():
    stream = torch.Stream(device="openreg")
    assert stream.device == torch.device("openreg:0")
    assert 1 <= stream.stream_id <= STREAMS_PER_PRIORITY
    other = torch.Stream(device="openreg:1", priority=-1)
    assert other.device == torch.device("openreg:1")
    assert torch.openreg.streams._wrap(other).priority == -1
    # An openreg Stream and the generic one with the same id are the same stream.
    assert torch.openreg.streams._wrap(stream) == stream


def test_accelerator_api_on_openreg():
    assert torch.accelerator.current_accelerator() == torch.device("openreg")
    assert torch.accelerator.device_count() == torch.openreg.device_count() == 2
    assert torch.accelerator.current_device_index() == 0
    torch.accelerator.set_device_index(1)
    assert torch.openreg.current_device() == 1
    assert torch.accelerator.current_device_index() == 1
    assert torch.accelerator.current_stream() == torch.openreg.default_stream(1)
    torch.accelerator.set_device_index(0)
    assert torch.openreg.current_device() == 0


def test_accelerator_set_stream_and_current_stream():
    stream = torch.Stream(device="openreg")
    torch.accelerator.set_stream(stream)
    assert torch.accelerator.current_stream() == stream
    assert torch.openreg.current_stream() == stream
    on_one = torch.Stream(device="openreg:1")
    torch.accelerator.set_stream(on_one)
    assert torch.accelerator.current_device_index() == 1
    assert torch.accelerator.current_stream(1) == on_one
    assert torch.accelerator.current_stream(0) == stream


def test_accelerator_synchronize_waits():
    with held_stream() as held:
        assert torch.accelerator.current_stream().query() is False
        held.release_soon()
        torch.accelerator.synchronize()
        assert held.released
    assert torch.accelerator.current_stream().query() is True


# --- query / synchronize ------------------------------------------------------------------


def test_query_true_when_idle_false_while_work_pending():
    stream = torch.openreg.Stream()
    stream.synchronize()
    assert stream.query() is True
    with held_stream(stream):
        assert stream.query() is False
    stream.synchronize()
    assert stream.query() is True


def test_stream_synchronize_waits_for_pending_work():
    stream = torch.openreg.Stream()
    with held_stream(stream) as held:
        held.release_soon()
        stream.synchronize()
        assert held.released
    assert stream.query() is True


def test_device_synchronize_waits_for_all_streams_of_the_device():
    streams = [torch.openreg.Stream(), torch.openreg.Stream(priority=-2)]
    with held_stream(streams[0]) as first, held_stream(streams[1]) as second:
        assert not any(stream.query() for stream in streams)
        first.release_soon()
        second.release_soon()
        torch.openreg.synchronize()
        assert first.released and second.released
    assert all(stream.query() for stream in streams)


def test_streams_without_wait_run_independently():
    slow, fast = torch.openreg.Stream(), torch.openreg.Stream()
    with held_stream(slow):
        with torch.openreg.stream(fast):
            torch.openreg._sleep(1)
        fast.synchronize()  # returns while ``slow`` is held: did not wait for it
        assert slow.query() is False


# --- FIFO order on one stream -------------------------------------------------------------


@pytest.mark.parametrize(
    ("ops", "expected"),
    [(("mul", "add"), 3.0), (("add", "mul"), 4.0)],
)
def test_kernels_on_one_stream_apply_in_order(ops, expected):
    x = torch.ones(8, device="openreg")
    apply = {"mul": lambda: x.mul_(2), "add": lambda: x.add_(1)}
    warm(apply["mul"], apply["add"])
    x.fill_(1.0)
    with held_stream():
        for op in ops:
            apply[op]()
        assert torch.openreg.current_stream().query() is False  # both still pending
    torch.testing.assert_close(x.cpu(), torch.full((8,), expected), rtol=0, atol=0)


def test_long_sequence_on_one_stream_matches_cpu():
    reference = torch.arange(16.0)
    x = reference.to("openreg")
    warm(lambda: x.mul_(1), lambda: x.add_(0), lambda: x.sub_(0))
    x.copy_(reference)
    with held_stream():  # the whole sequence is queued before any of it runs
        for step in range(60):
            for tensor in (reference, x):
                [tensor.mul_, tensor.add_, tensor.sub_][step % 3](step % 5 + 1)
    torch.testing.assert_close(x.cpu(), reference, rtol=0, atol=0)


# --- ordering two streams -----------------------------------------------------------------


def _producer_setup() -> tuple[torch.Tensor, torch.openreg.Stream, torch.openreg.Stream]:
    data = torch.zeros(64, device="openreg")
    torch.openreg.synchronize()  # the side streams below use it (found by OPENREG_DEBUG=races)
    producer, consumer = torch.openreg.Stream(), torch.openreg.Stream()
    with torch.openreg.stream(producer):
        warm(lambda: data.add_(5), lambda: data * 2)
    with torch.openreg.stream(consumer):
        warm(lambda: data * 2)
    data.zero_()
    torch.openreg.synchronize()
    return data, producer, consumer


def test_wait_stream_orders_consumer_after_producer():
    data, producer, consumer = _producer_setup()
    with held_stream(producer) as held:
        with torch.openreg.stream(producer):
            data.add_(5)
        consumer.wait_stream(producer)
        with torch.openreg.stream(consumer):
            result = data * 2
        assert consumer.query() is False  # waiting for the producer
        held.release_soon()
        consumer.synchronize()
        assert held.released
    assert producer.query() is True
    torch.testing.assert_close(result.cpu(), torch.full((64,), 10.0), rtol=0, atol=0)


def test_wait_event_orders_consumer_after_producer():
    data, producer, consumer = _producer_setup()
    with held_stream(producer) as held:
        with torch.openreg.stream(producer):
            data.add_(5)
            done = producer.record_event()
        consumer.wait_event(done)
        with torch.openreg.stream(consumer):
            result = data * 2
        assert consumer.query() is False
        held.release_soon()
        observed = read_now(result, consumer)
        assert held.released
    torch.testing.assert_close(observed, torch.full((64,), 10.0), rtol=0, atol=0)


def test_without_wait_consumer_sees_pending_producer_work(races_off: None) -> None:
    data, producer, consumer = _producer_setup()
    with held_stream(producer):
        with torch.openreg.stream(producer):
            data.add_(5)
        with torch.openreg.stream(consumer):
            result = data * 2
        # The consumer did not wait: it read ``data`` before the producer's add_ ran.
        observed = read_now(result, consumer)
        assert producer.query() is False
        torch.testing.assert_close(observed, torch.zeros(64), rtol=0, atol=0)
        torch.testing.assert_close(read_now(data, consumer), torch.zeros(64), rtol=0, atol=0)
    producer.synchronize()
    torch.testing.assert_close(data.cpu(), torch.full((64,), 5.0), rtol=0, atol=0)


def test_wait_stream_across_devices():
    source = torch.zeros(16, device="openreg:1")
    torch.openreg.synchronize(1)  # the producer stream uses it (found by OPENREG_DEBUG=races)
    producer = torch.openreg.Stream(device=1)
    consumer = torch.openreg.Stream(device=0)
    with torch.openreg.stream(producer):
        warm(lambda: source.add_(1))
    with held_stream(producer) as held:
        with torch.openreg.stream(producer):
            source.add_(1)
        consumer.wait_stream(producer)
        assert consumer.query() is False
        held.release_soon()
        consumer.synchronize()
        assert held.released
    assert producer.query() is True


def test_a_hold_never_released_expires_and_fails_its_work():
    # What tests/_async.py's held_stream relies on so that a broken test fails
    # instead of hanging: a hold lets its stream go after its limit, failing that work.
    stream = torch.openreg.Stream()
    hold = torch_openreg._C._StreamHold(stream.stream_id, stream.device_index, 0.05)
    with pytest.raises(RuntimeError, match=r"not released within 0\.05 s"):
        stream.synchronize()
    assert hold.expired
    assert not hold.released
    stream.synchronize()  # reported once; the stream keeps working
