"""Asynchronous execution on openreg: kernels are enqueued on the current
stream and the calling thread returns at once; operations that must observe
results wait, exactly as on CUDA.

Covered: launch returns immediately; synchronizing operations (.cpu(),
.item(), repr/print, tolist(), synchronize, stream/event synchronize); the
classic race of a non-blocking device->pinned-host copy; copy rules for
pinned and pageable memory; device->device copies on one and across devices;
errors inside queued kernels; multi-device independence; generator state.

Pending work is queued behind a held stream (``held_stream``): it stays queued
until the test releases the hold, however slowly the machine runs. A call that
must not wait returns while the hold is in place; a call that must wait is made
after ``release_soon``, which releases the hold once the call blocks, so
``held.released`` on its return shows that it waited. The first call of a new
operator signature runs synchronously (plan verification), so every signature a
test relies on being asynchronous is run once beforehand (``warm``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import torch
from _async import HeldStream, held_stream, warm

import torch_openreg  # noqa: F401  (registers the device)

SLEEP_MS = 50


def busy(device: int = 0) -> bool:
    """True while the current stream of ``device`` has pending work."""
    return not torch.openreg.current_stream(device).query()


# --- launch returns at once ---------------------------------------------------------------


def test_enqueue_returns_while_kernels_are_pending():
    x = torch.ones(1000, device="openreg")
    warm(lambda: x + 1)
    with held_stream():
        y = x + 1  # returns although the kernel cannot run before the release
        assert busy()
    torch.testing.assert_close(y.cpu(), torch.full((1000,), 2.0), rtol=0, atol=0)
    assert not busy()


def test_many_kernels_enqueue_without_waiting():
    x = torch.zeros(256, device="openreg")
    warm(lambda: x.add_(1))
    with held_stream():
        for _ in range(100):
            x.add_(1)
        assert busy()
    torch.testing.assert_close(x.cpu(), torch.full((256,), 101.0), rtol=0, atol=0)


def test_sleep_itself_is_asynchronous():
    # Queued behind a hold, the sleep returns on the host at once, and it runs on the
    # stream: between two events recorded around it, at least its duration passes.
    before, after = (torch.openreg.Event(enable_timing=True) for _ in range(2))
    with held_stream():
        before.record()
        torch.openreg._sleep(SLEEP_MS)
        after.record()
        assert busy()
    after.synchronize()
    assert before.elapsed_time(after) >= SLEEP_MS * 0.99


# --- synchronizing operations wait --------------------------------------------------------


@contextmanager
def _pending_result() -> Iterator[tuple[torch.Tensor, HeldStream]]:
    """``x * 3`` queued behind a hold, and the hold."""
    x = torch.arange(6.0, device="openreg")
    warm(lambda: x * 3)
    with held_stream() as held:
        result = x * 3
        assert busy()
        yield result, held


EXPECTED = torch.arange(6.0) * 3


@pytest.mark.parametrize(
    ("name", "observe"),
    [
        ("cpu", lambda t: t.cpu()),
        ("to_cpu", lambda t: t.to("cpu")),
        ("item", lambda t: t[5].item()),
        ("tolist", lambda t: t.tolist()),
        ("repr", repr),
        ("str", str),
        ("numpy", lambda t: t.cpu().numpy().tolist()),
    ],
)
def test_reading_results_waits_for_queued_work(name, observe):
    with _pending_result() as (result, held):
        held.release_soon()
        value = observe(result)
        assert held.released, f"{name} returned without waiting for the queued work"
    assert not busy()
    if name in ("cpu", "to_cpu"):
        torch.testing.assert_close(value, EXPECTED, rtol=0, atol=0)
    elif name == "item":
        assert value == 15.0
    elif name in ("tolist", "numpy"):
        assert value == EXPECTED.tolist()
    else:
        assert "[ 0.,  3.,  6.,  9., 12., 15.]" in value


def test_print_waits_for_queued_work(capsys):
    with _pending_result() as (result, held):
        held.release_soon()
        print(result)
        assert held.released
    assert "tensor([ 0.,  3.,  6.,  9., 12., 15.], device='openreg:0')" in capsys.readouterr().out
    assert not busy()


@pytest.mark.parametrize(
    "wait",
    [
        lambda: torch.openreg.synchronize(),
        lambda: torch.openreg.synchronize(0),
        lambda: torch.accelerator.synchronize(),
        lambda: torch.openreg.current_stream().synchronize(),
        lambda: torch.openreg.current_stream().record_event().synchronize(),
    ],
    ids=["device", "device_index", "accelerator", "stream", "event"],
)
def test_synchronize_calls_wait_for_queued_work(wait):
    with _pending_result() as (result, held):
        pinned = torch.full((6,), -1.0).pin_memory()
        pinned.copy_(result, non_blocking=True)
        held.release_soon()
        wait()
        assert held.released
    assert not busy()
    torch.testing.assert_close(pinned, EXPECTED, rtol=0, atol=0)


# --- the classic race: device -> pinned host, non_blocking --------------------------------


def test_non_blocking_copy_to_pinned_memory_is_read_stale_before_synchronize():
    device_tensor = torch.arange(64.0, device="openreg")
    warm(lambda: device_tensor * 2)
    pinned = torch.full((64,), -7.0).pin_memory()
    assert pinned.is_pinned()
    with held_stream():
        doubled = device_tensor * 2
        pinned.copy_(doubled, non_blocking=True)
        # Read before synchronizing: the copy has not run yet, the sentinel is still there.
        stale = pinned.clone()
    torch.testing.assert_close(stale, torch.full((64,), -7.0), rtol=0, atol=0)
    torch.openreg.synchronize()
    torch.testing.assert_close(pinned, torch.arange(64.0) * 2, rtol=0, atol=0)


def test_non_blocking_copy_to_pinned_memory_is_complete_after_its_event():
    device_tensor = torch.arange(64.0, device="openreg")
    warm(lambda: device_tensor + 5)
    pinned = torch.full((64,), -7.0).pin_memory()
    with held_stream() as held:
        pinned.copy_(device_tensor + 5, non_blocking=True)
        copied = torch.openreg.current_stream().record_event()
        assert copied.query() is False
        held.release_soon()
        copied.synchronize()
        assert held.released
    torch.testing.assert_close(pinned, torch.arange(64.0) + 5, rtol=0, atol=0)


def test_non_blocking_copy_to_pageable_memory_waits():
    device_tensor = torch.arange(64.0, device="openreg")
    warm(lambda: device_tensor * 2)
    pageable = torch.full((64,), -7.0)
    assert not pageable.is_pinned()
    with held_stream() as held:
        doubled = device_tensor * 2
        held.release_soon()
        pageable.copy_(doubled, non_blocking=True)
        assert held.released
    # As CUDA: a device->pageable copy is synchronous, data is there on return.
    torch.testing.assert_close(pageable, torch.arange(64.0) * 2, rtol=0, atol=0)
    assert not busy()


def test_blocking_copy_to_pinned_memory_waits():
    device_tensor = torch.arange(64.0, device="openreg")
    warm(lambda: device_tensor * 2)
    pinned = torch.full((64,), -7.0).pin_memory()
    with held_stream() as held:
        doubled = device_tensor * 2
        held.release_soon()
        pinned.copy_(doubled)  # non_blocking=False: synchronous
        assert held.released
    torch.testing.assert_close(pinned, torch.arange(64.0) * 2, rtol=0, atol=0)
    assert not busy()


def test_to_cpu_non_blocking_with_pinned_result():
    device_tensor = torch.arange(64.0, device="openreg")
    warm(lambda: device_tensor * 2)
    with held_stream():
        doubled = device_tensor * 2
        host = doubled.to("cpu", non_blocking=True)
        # PyTorch allocates a pinned result for non_blocking device->host .to(): asynchronous.
        assert host.is_pinned()
        assert busy()
    torch.openreg.synchronize()
    torch.testing.assert_close(host, torch.arange(64.0) * 2, rtol=0, atol=0)


# --- host -> device copies ----------------------------------------------------------------


def test_non_blocking_copy_from_pinned_memory_is_asynchronous():
    pinned = torch.full((64,), 1.0).pin_memory()
    device_tensor = torch.zeros(64, device="openreg")
    with held_stream():
        device_tensor.copy_(pinned, non_blocking=True)
        assert busy()
        # The copy has not read the source yet: changing it now changes what arrives
        # (the H2D counterpart of the classic race; CUDA behaves the same).
        pinned.fill_(9.0)
    torch.testing.assert_close(device_tensor.cpu(), torch.full((64,), 9.0), rtol=0, atol=0)


def test_copy_from_pageable_memory_is_synchronous():
    pageable = torch.full((64,), 1.0)
    device_tensor = torch.zeros(64, device="openreg")
    with held_stream() as held:
        held.release_soon()
        device_tensor.copy_(pageable, non_blocking=True)
        assert held.released  # synchronous: it waited for the queued work, then copied
        # The source has been consumed on return: changing it now cannot matter.
        pageable.fill_(9.0)
    torch.testing.assert_close(device_tensor.cpu(), torch.full((64,), 1.0), rtol=0, atol=0)


def test_blocking_copy_from_pinned_memory_is_synchronous():
    pinned = torch.full((64,), 1.0).pin_memory()
    device_tensor = torch.zeros(64, device="openreg")
    with held_stream() as held:
        held.release_soon()
        device_tensor.copy_(pinned)
        assert held.released
        pinned.fill_(9.0)
    torch.testing.assert_close(device_tensor.cpu(), torch.full((64,), 1.0), rtol=0, atol=0)


# --- device -> device copies --------------------------------------------------------------


def test_same_device_copy_is_ordered_and_asynchronous():
    source = torch.arange(100.0, device="openreg")
    destination = torch.zeros(100, device="openreg")
    warm(lambda: source * 2, lambda: destination.copy_(source))
    with held_stream():
        doubled = source * 2
        destination.copy_(doubled)
        assert busy()
    torch.testing.assert_close(destination.cpu(), torch.arange(100.0) * 2, rtol=0, atol=0)


def test_cross_device_copy_waits_for_source_side_work():
    source = torch.arange(100.0, device="openreg:0")
    destination = torch.zeros(100, device="openreg:1")
    warm(lambda: source * 2, lambda: destination + 1, lambda: destination.copy_(source))
    with held_stream(torch.openreg.current_stream(0)):
        doubled = source * 2  # pending on device 0
        destination.copy_(doubled)
        result = destination + 1  # on device 1, after the copy
        assert busy(0)
        assert busy(1)  # device 1 waits for device 0's queued work
    torch.testing.assert_close(result.cpu(), torch.arange(100.0) * 2 + 1, rtol=0, atol=0)


def test_cross_device_copy_waits_for_destination_side_work():
    source = torch.full((100,), 5.0, device="openreg:0")
    destination = torch.arange(100.0, device="openreg:1")
    warm(lambda: destination * 1, lambda: destination.copy_(source))
    destination.copy_(torch.arange(100.0))
    torch.openreg.synchronize(1)
    with held_stream(torch.openreg.current_stream(1)):
        before = destination * 1  # pending on device 1: must read the old contents
        destination.copy_(source)
        assert busy(1)
    torch.testing.assert_close(before.cpu(), torch.arange(100.0), rtol=0, atol=0)
    torch.testing.assert_close(destination.cpu(), torch.full((100,), 5.0), rtol=0, atol=0)


def test_cross_device_to_is_correct_without_explicit_synchronize():
    source = torch.arange(50.0, device="openreg:1")
    warm(lambda: source.mul_(1))
    with held_stream(torch.openreg.current_stream(1)):
        source.mul_(3)
        moved = source.to("openreg:0")
    assert moved.device == torch.device("openreg:0")
    torch.testing.assert_close(moved.cpu(), torch.arange(50.0) * 3, rtol=0, atol=0)


def test_cross_device_copy_is_ordered_with_the_current_side_streams():
    source = torch.full((100,), 5.0, device="openreg:0")
    destination = torch.arange(100.0, device="openreg:1")
    side = torch.openreg.Stream(device=1)
    # As on CUDA: work on ``side`` may use what device 1's current stream made only
    # after waiting for it (OPENREG_DEBUG=races reports the race otherwise).
    side.wait_stream(torch.openreg.current_stream(1))
    with torch.openreg.stream(side):
        warm(lambda: destination * 1, lambda: destination.copy_(destination))
        with held_stream(side):
            before = destination * 1  # on ``side``: reads the old contents
            destination.copy_(source)
            after = destination * 1  # on ``side``: sees the copy
            assert side.query() is False
        torch.testing.assert_close(before.cpu(), torch.arange(100.0), rtol=0, atol=0)
        torch.testing.assert_close(after.cpu(), torch.full((100,), 5.0), rtol=0, atol=0)


# --- queued work uses the arguments as they were at the call -------------------------------


def test_metadata_change_after_enqueue_does_not_leak_into_queued_work():
    x = torch.arange(9.0).reshape(3, 3).to("openreg")
    warm(lambda: x * 1)
    with held_stream():
        y = x * 1
        x.t_()  # while y's kernel is still queued
        assert busy()
    torch.testing.assert_close(y.cpu(), torch.arange(9.0).reshape(3, 3), rtol=0, atol=0)
    torch.testing.assert_close(x.cpu(), torch.arange(9.0).reshape(3, 3).t(), rtol=0, atol=0)


def test_resize_after_enqueue_does_not_disturb_queued_work():
    x = torch.ones(1000, device="openreg")
    warm(lambda: x * 2)
    with held_stream():
        y = x * 2
        x.resize_(300_000)  # new storage; the old block goes back to the stream's pool
        assert busy()
    torch.testing.assert_close(y.cpu(), torch.full((1000,), 2.0), rtol=0, atol=0)
    torch.testing.assert_close(x[:1000].cpu(), torch.ones(1000), rtol=0, atol=0)


# --- errors inside queued kernels ---------------------------------------------------------


def _cpu_error(call: Callable[[], object]) -> BaseException:
    with pytest.raises(Exception) as info:
        call()
    return info.value


def test_first_call_of_a_signature_raises_immediately_with_the_cpu_message():
    # A signature no other test uses: its first call runs synchronously.
    source = torch.arange(31 * 2, dtype=torch.float64).reshape(31, 2)
    bad = torch.tensor([0, 40, 2])
    expected = _cpu_error(lambda: torch.index_select(source, 0, bad))
    on_device, bad_on_device = source.to("openreg"), bad.to("openreg")
    with pytest.raises(type(expected)) as info:
        torch.index_select(on_device, 0, bad_on_device)
    assert str(info.value) == str(expected)
    # Nothing is left pending or sticky; the device keeps working.
    torch.openreg.synchronize()
    good = torch.index_select(on_device, 0, torch.tensor([30, 0], device="openreg"))
    torch.testing.assert_close(good.cpu(), source[[30, 0]], rtol=0, atol=0)


def _queue_failing_index_select(
    also_warm: Callable[[torch.Tensor], object] = lambda t: t + 1,
) -> tuple[torch.Tensor, str]:
    """Enqueue an index_select whose index is out of range, on a signature that already ran.

    Returns a tensor that works (``also_warm`` of it has run once) and the CPU's error message.
    """
    source = torch.arange(37, dtype=torch.int32)
    bad = torch.tensor([1, 2, 3, 99, 4, 5])
    message = str(_cpu_error(lambda: torch.index_select(source, 0, bad)))
    on_device = source.to("openreg")
    good_index = torch.tensor([1, 2, 3, 4, 5, 6], device="openreg")
    warm(lambda: torch.index_select(on_device, 0, good_index), lambda: also_warm(on_device))
    bad_index = bad.to("openreg")
    with held_stream():
        torch.index_select(on_device, 0, bad_index)  # enqueued: no error yet
    return on_device, message


@pytest.mark.parametrize(
    "synchronizing_call",
    [
        lambda t: torch.openreg.synchronize(),
        lambda t: torch.accelerator.synchronize(),
        lambda t: torch.openreg.current_stream().synchronize(),
        lambda t: torch.openreg.current_stream().record_event().synchronize(),
        lambda t: t.cpu(),
        lambda t: t[0].item(),
    ],
    ids=["synchronize", "accelerator", "stream", "event", "cpu", "item"],
)
def test_error_in_queued_kernel_surfaces_at_next_synchronizing_call(synchronizing_call):
    working, message = _queue_failing_index_select()
    with pytest.raises(RuntimeError) as info:
        synchronizing_call(working)
    assert message in str(info.value)
    # Reported once, then the device is usable again.
    torch.openreg.synchronize()
    torch.testing.assert_close((working + 1).cpu(), torch.arange(1, 38, dtype=torch.int32))


def test_error_in_queued_kernel_surfaces_at_query():
    _, message = _queue_failing_index_select()
    deadline = time.perf_counter() + 60  # reached at once unless the machine is very busy
    with pytest.raises(RuntimeError) as info:
        while torch.openreg.current_stream().query() is False and time.perf_counter() < deadline:
            time.sleep(0.005)
    assert message in str(info.value)
    torch.openreg.synchronize()


def test_error_on_a_side_stream_surfaces_at_device_synchronize():
    stream = torch.openreg.Stream()
    with torch.openreg.stream(stream):
        working, message = _queue_failing_index_select()
    with pytest.raises(RuntimeError, match="index out of range") as info:
        torch.openreg.synchronize()
    assert message in str(info.value)
    with torch.openreg.stream(stream):
        torch.testing.assert_close(working.cpu(), torch.arange(37, dtype=torch.int32))


def test_work_queued_after_a_failed_kernel_still_runs():
    working, message = _queue_failing_index_select(lambda t: t * 2)
    doubled = working * 2  # queued behind the failing kernel
    with pytest.raises(RuntimeError) as info:
        doubled.cpu()
    assert message in str(info.value)
    torch.testing.assert_close(doubled.cpu(), torch.arange(37, dtype=torch.int32) * 2)


def test_error_in_queued_kernel_is_not_lost_by_empty_cache():
    # empty_cache waits for the device before returning cached segments; the
    # failure of a queued kernel must still reach the user (from empty_cache
    # itself, as cudaDeviceSynchronize inside CUDA's emptyCache would, or from
    # the next synchronizing call).
    _, message = _queue_failing_index_select()
    cached = torch.ones(1000, device="openreg")
    del cached  # something for empty_cache to release
    reported = []
    try:
        torch.openreg.empty_cache()
    except RuntimeError as error:
        reported.append(str(error))
    try:
        torch.openreg.synchronize()
    except RuntimeError as error:
        reported.append(str(error))
    assert len(reported) == 1, "the kernel's failure was lost (or reported twice)"
    assert message in reported[0]


def test_error_on_device_one_is_reported_by_device_one_only():
    source = torch.arange(37, dtype=torch.int32, device="openreg:1")
    good = torch.tensor([1, 2, 3, 4, 5, 6], device="openreg:1")
    bad = torch.tensor([1, 2, 3, 99, 4, 5], device="openreg:1")
    warm(lambda: torch.index_select(source, 0, good))
    torch.index_select(source, 0, bad)
    torch.openreg.synchronize(0)  # device 0 has nothing to report
    with pytest.raises(RuntimeError, match="device 1 failed: index out of range in self"):
        torch.openreg.synchronize(1)
    torch.openreg.synchronize(1)


# An asynchronous kernel fails and nothing synchronizes afterwards: the exit handler's
# own synchronization is the last chance to report it.
PENDING_AT_EXIT = """
import torch, torch_openreg
for device in DEVICES:
    x = torch.arange(5.0, device=device)
    torch.index_select(x, 0, torch.tensor([0, 1], device=device))  # first call: synchronous
    torch.openreg.synchronize(device)
    torch.index_select(x, 0, torch.tensor([0, 7], device=device))  # fails on the stream
AFTER
print("script done", flush=True)
"""


def _exit_with_pending(run_python, devices: list[str], after: str = ""):
    code = PENDING_AT_EXIT.replace("DEVICES", repr(devices)).replace("AFTER", after)
    result = run_python(code)
    assert "script done" in result.stdout, result.stderr
    return result


@pytest.mark.child_interpreters
def test_a_kernel_error_pending_at_exit_is_reported_and_fails_the_process(run_python):
    result = _exit_with_pending(run_python, ["openreg:0"])
    assert result.returncode == 1, result.stderr  # what an unhandled exception gives
    report = [line for line in result.stderr.splitlines() if "openreg" in line]
    assert len(report) == 1, result.stderr
    assert "still pending at exit" in report[0], report
    assert "index out of range in self" in report[0], report  # the error
    assert "aten::index_select" in report[0], report  # the operator
    assert "openreg:0" in report[0], report


@pytest.mark.child_interpreters
def test_kernel_errors_pending_at_exit_on_two_devices_are_all_reported(run_python):
    result = _exit_with_pending(run_python, ["openreg:0", "openreg:1"])
    assert result.returncode == 1, result.stderr
    for device in ("openreg:0", "openreg:1"):
        assert any(
            device in line and "aten::index_select" in line for line in result.stderr.splitlines()
        ), result.stderr


@pytest.mark.child_interpreters
def test_a_kernel_error_reported_before_exit_is_not_reported_again(run_python):
    caught = "try:\n    torch.openreg.synchronize()\nexcept RuntimeError:\n    print('caught')"
    result = _exit_with_pending(run_python, ["openreg:0"], after=caught)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["caught", "script", "done"]
    assert "index out of range" not in result.stderr, result.stderr


def test_data_dependent_operator_waits_for_queued_work():
    x = torch.tensor([0.0, 1.0, 0.0, 2.0], device="openreg")
    warm(lambda: x.nonzero(), lambda: x.add_(0))
    with held_stream() as held:
        x.add_(1)  # queued: every element becomes non-zero
        held.release_soon()
        indices = x.nonzero()  # its output shape depends on the data: synchronous, like CUDA
        assert held.released
    assert indices.shape == (4, 1)


def test_bounded_queue_accepts_more_work_than_it_holds():
    # A stream queue holds 1024 pieces of work; the host waits when it runs further ahead.
    x = torch.zeros(8, device="openreg")
    warm(lambda: x.add_(1))
    x.zero_()
    with held_stream() as held:
        held.wait_running()  # the hold has left the queue: 1024 more pieces of work fit
        held.release_soon()  # once the host waits for room in the full queue
        for _ in range(3000):
            x.add_(1)
        assert held.released, "3000 pieces of work fitted in a queue of 1024"
    torch.testing.assert_close(x.cpu(), torch.full((8,), 3000.0), rtol=0, atol=0)


def test_pinned_destination_freed_before_its_copy_ran_is_not_reused():
    device_tensor = torch.arange(4096.0, device="openreg")
    warm(lambda: device_tensor * 2)
    with held_stream():
        destination = torch.empty(4096).pin_memory()
        freed = destination.data_ptr()
        destination.copy_(device_tensor * 2, non_blocking=True)
        del destination  # the queued copy still writes there
        other = torch.empty(4096).pin_memory()
        assert other.data_ptr() != freed
        other.fill_(-1.0)
    torch.openreg.synchronize()
    torch.testing.assert_close(other, torch.full((4096,), -1.0), rtol=0, atol=0)


def test_pinned_source_freed_before_its_copy_ran_is_not_reused():
    source = torch.full((4096,), 3.0).pin_memory()
    destination = torch.zeros(4096, device="openreg")
    with held_stream():
        destination.copy_(source, non_blocking=True)
        del source  # the queued copy still reads it
        other = torch.empty(4096).pin_memory()
        other.fill_(-9.0)
    torch.testing.assert_close(destination.cpu(), torch.full((4096,), 3.0), rtol=0, atol=0)


def test_backward_of_work_on_a_side_stream_is_ordered_with_the_caller():
    weight = torch.randn(64, 64, device="openreg", requires_grad=True)
    inputs = torch.randn(32, 64, device="openreg")
    reference = weight.detach().cpu().requires_grad_()
    (inputs.cpu() @ reference).tanh().sum().backward()
    side = torch.openreg.Stream()
    side.wait_stream(torch.openreg.current_stream())
    for _ in range(2):  # the first round runs new signatures synchronously (they wait)
        weight.grad = None
        with held_stream(side) as held:
            # Released once the host waits: in the second round, not before backward.
            held.release_soon()
            with torch.openreg.stream(side):
                loss = (inputs @ weight).tanh().sum()
            loss.backward()  # as on CUDA: backward kernels use the forward's stream
        torch.testing.assert_close(weight.grad.cpu(), reference.grad, rtol=1e-5, atol=1e-5)


# --- multiple devices ---------------------------------------------------------------------


def test_each_device_has_its_own_streams():
    assert torch.openreg.default_stream(0) != torch.openreg.default_stream(1)
    with held_stream(torch.openreg.current_stream(0)):
        assert busy(0)
        assert not busy(1)
        with held_stream(torch.openreg.current_stream(1)):
            assert busy(1)


def test_work_on_device_one_does_not_wait_for_device_zero():
    on_one = torch.ones(10, device="openreg:1")
    warm(lambda: on_one + 1)
    with held_stream(torch.openreg.current_stream(0)):
        result = (on_one + 1).cpu()  # returns while device 0 is held
        assert busy(0)
    torch.testing.assert_close(result, torch.full((10,), 2.0), rtol=0, atol=0)


def test_synchronize_of_one_device_does_not_wait_for_the_other():
    with held_stream(torch.openreg.current_stream(0)):
        torch.openreg._sleep(1, 1)
        torch.openreg.synchronize(1)  # returns while device 0 is held
        assert busy(0)
        assert not busy(1)


# --- random numbers -----------------------------------------------------------------------


def test_get_rng_state_waits_for_queued_random_kernels():
    warm(lambda: torch.rand(500, device="openreg"))
    torch.openreg.manual_seed(1234)
    with held_stream() as held:
        queued = [torch.rand(500, device="openreg") for _ in range(3)]
        assert busy()
        held.release_soon()
        state = torch.openreg.get_rng_state()
        assert held.released
    assert not busy()
    torch.openreg.synchronize()
    assert torch.equal(state, torch.openreg.get_rng_state())
    # The state is the one after the queued draws: restoring it replays what follows.
    following = torch.rand(500, device="openreg").cpu()
    torch.openreg.set_rng_state(state)
    replay = torch.rand(500, device="openreg").cpu()
    torch.testing.assert_close(replay, following, rtol=0, atol=0)
    assert not any(torch.equal(following, q.cpu()) for q in queued)


def test_queued_random_kernels_match_the_synchronous_sequence():
    warm(lambda: torch.rand(500, device="openreg"))
    torch.openreg.manual_seed(99)
    expected = [torch.rand(500, device="openreg").cpu() for _ in range(3)]
    torch.openreg.manual_seed(99)
    with held_stream():
        queued = [torch.rand(500, device="openreg") for _ in range(3)]
    for got, want in zip(queued, expected, strict=True):
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


def test_manual_seed_does_not_affect_already_queued_random_kernels():
    warm(lambda: torch.rand(500, device="openreg"))
    torch.openreg.manual_seed(7)
    expected = torch.rand(500, device="openreg").cpu()
    torch.openreg.manual_seed(7)
    with held_stream() as held:
        queued = torch.rand(500, device="openreg")
        held.release_soon()
        torch.openreg.manual_seed(8)  # must wait for ``queued`` to draw first
        assert held.released
    torch.testing.assert_close(queued.cpu(), expected, rtol=0, atol=0)


def test_rng_state_of_device_one_waits_for_its_queued_kernels():
    warm(lambda: torch.rand(300, device="openreg:1"))
    torch.openreg.manual_seed_all(5)
    with held_stream(torch.openreg.current_stream(1)) as held:
        torch.rand(300, device="openreg:1")
        assert busy(1)
        held.release_soon()
        state = torch.openreg.get_rng_state(1)
        assert held.released
    assert not busy(1)
    torch.openreg.synchronize(1)
    assert torch.equal(state, torch.openreg.get_rng_state(1))


@pytest.mark.parametrize(
    "milliseconds", [-1, -1e-9, float("nan"), float("inf"), float("-inf"), 1e300, 86_400_001]
)
def test_sleep_rejects_bad_durations(milliseconds):
    with pytest.raises(ValueError, match="from 0 to 86400000") as info:
        torch.openreg._sleep(milliseconds)
    assert repr(milliseconds) in str(info.value)
    assert torch.openreg.current_stream().query(), "a rejected sleep must not enqueue anything"
