"""The device guard: device-generic PyTorch code (DeviceGuard, torch.Stream,
torch.Event, torch.accelerator) driving openreg.

Basic sanity only: ids, devices and current-stream bookkeeping are right and
work runs where it should. Deep stream semantics are tested elsewhere.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import torch

STREAMS_PER_PRIORITY = 32


@pytest.fixture(autouse=True)
def _restore_current_streams() -> Iterator[None]:
    """Tests here change the thread's current streams; put the previous ones back."""
    previous = [torch.accelerator.current_stream(i) for i in range(torch.openreg.device_count())]
    yield
    for stream in previous:
        torch.accelerator.set_stream(stream)
    torch.accelerator.set_device_index(0)


# --- DeviceGuard -------------------------------------------------------------------------


def test_device_context_places_new_tensors():
    with torch.openreg.device(1):
        tensor = torch.empty(2, device="openreg")
        assert tensor.device == torch.device("openreg:1")
        assert torch.zeros(2, device="openreg").device == torch.device("openreg:1")
    assert torch.empty(2, device="openreg").device == torch.device("openreg:0")


@pytest.mark.usefixtures("steady_memory_stats")
def test_ops_run_on_their_tensors_device_and_restore_current():
    cpu = torch.arange(6.0)
    on_one = cpu.to("openreg:1")
    before = torch.openreg.memory_allocated(1)
    result = on_one * 2 + 1
    assert result.device == torch.device("openreg:1")
    assert torch.openreg.memory_allocated(1) > before
    assert torch.openreg.current_device() == 0
    torch.testing.assert_close(result.cpu(), cpu * 2 + 1, rtol=0, atol=0)


def test_explicit_index_wins_over_current_device():
    with torch.openreg.device(1):
        assert torch.empty(1, device="openreg:0").device == torch.device("openreg:0")
        assert torch.openreg.current_device() == 1


def test_accelerator_device_index_context():
    with torch.accelerator.device_index(1):
        assert torch.openreg.current_device() == 1
        assert torch.empty(1, device="openreg").device == torch.device("openreg:1")
    assert torch.openreg.current_device() == 0


def test_accelerator_set_and_current_device_index():
    torch.accelerator.set_device_index(1)
    assert torch.accelerator.current_device_index() == 1
    assert torch.openreg.current_device() == 1
    torch.accelerator.set_device_index("openreg:0")
    assert torch.accelerator.current_device_index() == 0


def test_accelerator_set_device_index_invalid_raises():
    with pytest.raises(RuntimeError, match=r"valid indices 0\.\.1"):
        torch.accelerator.set_device_index(2)
    assert torch.accelerator.current_device_index() == 0


def test_accelerator_synchronize():
    tensor = torch.randn(128, 128, device="openreg:1")
    product = tensor @ tensor
    torch.accelerator.synchronize()
    torch.accelerator.synchronize(1)
    torch.accelerator.synchronize("openreg:1")
    torch.testing.assert_close(product.cpu(), tensor.cpu() @ tensor.cpu())


# --- streams --------------------------------------------------------------------------


@pytest.mark.parametrize("device", [0, 1])
def test_current_stream_is_default_stream(device):
    stream = torch.accelerator.current_stream(device)
    assert isinstance(stream, torch.Stream)
    assert stream.device == torch.device(f"openreg:{device}")
    assert stream.device_index == device
    assert stream.stream_id == 0


def test_current_stream_follows_current_device():
    with torch.openreg.device(1):
        assert torch.accelerator.current_stream().device == torch.device("openreg:1")
    assert torch.accelerator.current_stream().device == torch.device("openreg:0")


@pytest.mark.parametrize("device", ["openreg", "openreg:1"])
def test_new_stream_device_and_id(device):
    stream = torch.Stream(device=device)
    expected = torch.device(device if ":" in device else "openreg:0")
    assert stream.device == expected
    assert stream.device_type == torch.accelerator.current_stream().device_type
    assert 1 <= stream.stream_id <= STREAMS_PER_PRIORITY


def test_new_stream_uses_current_device():
    with torch.openreg.device(1):
        assert torch.Stream(device="openreg").device == torch.device("openreg:1")


def test_stream_pool_ids_per_priority():
    # ids are 1 + level * 32 + slot: priority 0 -> 1..32, -1 -> 33..64, -2 -> 65..96,
    # round-robin within a level, and priorities beyond -2 are clamped.
    expected = {
        0: range(1, 33),
        -1: range(33, 65),
        -2: range(65, 97),
        -5: range(65, 97),
        3: range(1, 33),
    }
    for priority, ids in expected.items():
        seen = {torch.Stream(device="openreg", priority=priority).stream_id for _ in range(40)}
        assert seen <= set(ids), priority
    full_cycle = {torch.Stream(device="openreg:1").stream_id for _ in range(STREAMS_PER_PRIORITY)}
    assert full_cycle == set(range(1, 33))


def test_stream_query_and_synchronize():
    stream = torch.Stream(device="openreg")
    stream.synchronize()
    assert stream.query() is True


def test_set_stream_makes_it_current():
    stream = torch.Stream(device="openreg")
    torch.accelerator.set_stream(stream)
    assert torch.accelerator.current_stream() == stream
    assert torch.accelerator.current_stream(1).stream_id == 0
    result = torch.arange(4.0, device="openreg") * 3
    torch.testing.assert_close(result.cpu(), torch.arange(4.0) * 3, rtol=0, atol=0)


def test_set_stream_on_other_device_sets_that_device():
    stream = torch.Stream(device="openreg:1")
    torch.accelerator.set_stream(stream)
    # As on CUDA, set_stream also makes the stream's device current.
    assert torch.openreg.current_device() == 1
    assert torch.accelerator.current_stream(1) == stream
    assert torch.accelerator.current_stream(0).stream_id == 0


def test_stream_context_manager():
    stream = torch.Stream(device="openreg")
    with stream:
        assert torch.accelerator.current_stream() == stream
        result = torch.ones(3, device="openreg") + 1
    assert torch.accelerator.current_stream().stream_id == 0
    # result is written on `stream`: the default stream (.cpu() below) must wait for it.
    torch.accelerator.current_stream().wait_stream(stream)
    torch.testing.assert_close(result.cpu(), torch.full((3,), 2.0), rtol=0, atol=0)


def test_current_stream_is_per_thread():
    stream = torch.Stream(device="openreg")
    torch.accelerator.set_stream(stream)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(torch.accelerator.current_stream()))
    thread.start()
    thread.join()
    assert seen[0].stream_id == 0
    assert seen[0].device == torch.device("openreg:0")
    assert torch.accelerator.current_stream() == stream


def test_stream_wait_stream_and_wait_event():
    first = torch.Stream(device="openreg")
    second = torch.Stream(device="openreg:1")
    first.wait_stream(second)
    first.wait_event(second.record_event())
    first.synchronize()
    assert first.query()


# --- events ---------------------------------------------------------------------------


def test_event_device_before_and_after_record():
    event = torch.Event(device="openreg")
    assert event.device.type == "openreg"
    event.record()
    event.synchronize()
    assert event.device == torch.device("openreg:0")
    assert event.query() is True
    assert event.event_id != 0


def test_event_recorded_on_stream_of_other_device():
    stream = torch.Stream(device="openreg:1")
    event = stream.record_event()
    assert isinstance(event, torch.Event)
    assert event.device == torch.device("openreg:1")
    event.synchronize()
    assert event.query()


def test_event_record_uses_current_device():
    with torch.openreg.device(1):
        event = torch.Event()
        event.record()
    assert event.device == torch.device("openreg:1")


def test_event_cannot_be_rerecorded_on_another_device():
    event = torch.Event(device="openreg")
    event.record(torch.Stream(device="openreg:0"))
    with pytest.raises(RuntimeError, match="does not match recording stream's device"):
        event.record(torch.Stream(device="openreg:1"))


def test_event_elapsed_time():
    start = torch.Event(device="openreg", enable_timing=True)
    end = torch.Event(device="openreg", enable_timing=True)
    start.record()
    torch.randn(256, 256, device="openreg") @ torch.randn(256, 256, device="openreg")
    end.record()
    end.synchronize()
    elapsed = start.elapsed_time(end)
    assert isinstance(elapsed, float)
    assert elapsed >= 0.0
