"""The stream-ordered caching allocator of openreg (CUDA's contract).

A block freed on the host while queued work may still use it goes back to the
pool of the stream it was allocated on: the next allocation there may reuse it
at once, because that stream's later work runs after the queued use. It is
never handed to another stream. Memory used on another stream must be declared
with ``Tensor.record_stream``, which defers its reuse until that stream's
queued work is done. ``empty_cache`` waits for the device before returning
memory to the runtime.

Pending work is queued behind a held stream (``held_stream``), so it is still
pending when the test looks, however slowly the machine runs. Tensors of 12 MiB
get a segment of their own (no splitting, no sharing), and ``empty_cache``
first drops every other cached block, so which block an allocation receives is
predictable.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from _async import HeldStream, held_stream, warm

import torch_openreg

# Tests here compare exact memory statistics (conftest.py).
pytestmark = pytest.mark.usefixtures("steady_memory_stats")

LARGE = 3 * 1024 * 1024  # float32 elements: 12 MiB, a segment of its own
SMALL = 4096  # float32 elements: 16 KiB, cut from a shared small segment


def full(value: float, n: int = LARGE) -> torch.Tensor:
    return torch.full((n,), value)


def assert_all(tensor: torch.Tensor, value: float) -> None:
    torch.testing.assert_close(tensor.cpu(), full(value, tensor.numel()), rtol=0, atol=0)


def _warm_signatures(n: int) -> None:
    a = torch.ones(n, device="openreg")
    warm(lambda: a * 2, lambda: a.fill_(-1.0), lambda: a.add_(1))


# --- freeing a tensor whose kernel is still queued (same stream) --------------------------


def test_freed_input_of_queued_kernel_is_not_corrupted_by_a_new_tensor():
    _warm_signatures(LARGE)
    torch.openreg.empty_cache()
    with held_stream():
        a = torch.ones(LARGE, device="openreg")
        b = a * 2  # queued: reads a later
        freed = a.data_ptr()
        del a
        c = torch.empty(LARGE, device="openreg")
        assert c.data_ptr() == freed  # same stream: reused at once (stream order protects it)
        c.fill_(-1.0)
        assert not torch.openreg.current_stream().query()
    assert_all(b, 2.0)
    assert_all(c, -1.0)


def test_freed_output_of_queued_kernel_is_not_corrupted_by_a_new_tensor():
    _warm_signatures(LARGE)
    torch.openreg.empty_cache()
    a = torch.ones(LARGE, device="openreg")
    with held_stream():
        b = a * 2  # queued: writes b later
        freed = b.data_ptr()
        del b
        c = torch.empty(LARGE, device="openreg")
        assert c.data_ptr() == freed
        c.fill_(-1.0)  # runs after the write of the freed b
    assert_all(c, -1.0)
    assert_all(a, 1.0)


def test_repeated_free_and_reuse_of_small_blocks_keeps_results_correct():
    _warm_signatures(SMALL)
    results, reused = [], 0
    with held_stream():
        for step in range(30):
            a = torch.full((SMALL,), float(step), device="openreg")
            results.append(a * 2)
            freed = a.data_ptr()
            del a
            c = torch.empty(SMALL, device="openreg")
            reused += c.data_ptr() == freed
            c.fill_(-1.0)
        assert not torch.openreg.current_stream().query()
    assert reused > 0
    for step, result in enumerate(results):
        assert_all(result, 2.0 * step)


# --- never handed to another stream -------------------------------------------------------


def test_block_freed_while_queued_is_not_handed_to_another_stream():
    other = torch.openreg.Stream()
    with torch.openreg.stream(other):
        _warm_signatures(LARGE)
    _warm_signatures(LARGE)
    torch.openreg.empty_cache()
    with held_stream():
        a = torch.ones(LARGE, device="openreg")
        b = a * 2
        freed = a.data_ptr()
        del a
        with torch.openreg.stream(other):
            c = torch.empty(LARGE, device="openreg")
            c.fill_(-1.0)  # ``other`` is idle: this runs now, before b's kernel reads a
        assert c.data_ptr() != freed
        other.synchronize()  # the fill has run; b's kernel has not
        assert not torch.openreg.current_stream().query()
    assert_all(b, 2.0)
    with torch.openreg.stream(other):
        assert_all(c, -1.0)


def test_freed_output_is_not_handed_to_another_stream():
    other = torch.openreg.Stream()
    with torch.openreg.stream(other):
        _warm_signatures(LARGE)
    _warm_signatures(LARGE)
    torch.openreg.empty_cache()
    a = torch.ones(LARGE, device="openreg")
    with held_stream():
        b = a * 2  # writes b's block later
        freed = b.data_ptr()
        del b
        with torch.openreg.stream(other):
            c = torch.empty(LARGE, device="openreg")
            c.fill_(-1.0)
        assert c.data_ptr() != freed
        other.synchronize()  # the fill has run; the write of b has not
    torch.openreg.synchronize()
    assert_all(c, -1.0)


# --- record_stream ------------------------------------------------------------------------


@contextmanager
def _used_on_other_stream(
    record: bool,
) -> Iterator[tuple[torch.Tensor, int, torch.openreg.Stream, HeldStream]]:
    """x allocated on the current stream, read by held work on another stream, then freed.

    Yields (y, x's freed address, the using stream, its hold); y's kernel (which reads x)
    stays queued until the hold is released.
    """
    allocating, using = torch.openreg.current_stream(), torch.openreg.Stream()
    with torch.openreg.stream(using):
        _warm_signatures(LARGE)
    _warm_signatures(LARGE)
    torch.openreg.empty_cache()
    x = torch.ones(LARGE, device="openreg")
    x.mul_(3)
    using.wait_stream(allocating)
    with held_stream(using) as held:
        with torch.openreg.stream(using):
            y = x * 2
        if record:
            x.record_stream(using)
        freed = x.data_ptr()
        del x
        yield y, freed, using, held


def test_record_stream_protects_memory_used_on_another_stream():
    with _used_on_other_stream(record=True) as (y, freed, using, _):
        z = torch.empty(LARGE, device="openreg")
        assert z.data_ptr() != freed  # not reused while ``using`` has queued work
        z.fill_(-5.0)  # the allocating stream is idle: runs now
        assert not using.query()
    with torch.openreg.stream(using):
        assert_all(y, 6.0)
    assert_all(z, -5.0)


def test_record_stream_defers_the_release_until_the_work_is_done():
    with _used_on_other_stream(record=True) as (y, freed, using, held):
        # As CUDA counts it: x's bytes stopped being allocated when it was freed,
        # but its block stays active (a pending free) until ``using`` is done.
        stats = torch.openreg.memory_stats()
        active, allocated = stats["active_bytes.all.current"], stats["allocated_bytes.all.current"]
        assert active == allocated + LARGE * 4
        assert not using.query()
        held.release()
        using.synchronize()
        z = torch.empty(LARGE, device="openreg")  # the pool collects finished frees here
        assert torch.openreg.memory_stats()["active_bytes.all.current"] == active
        # Once the work is done, the allocating stream gets the block again.
        assert z.data_ptr() == freed
        z.fill_(-5.0)
    assert_all(y, 6.0)


def test_without_record_stream_the_block_is_reused_at_once(races_off: None) -> None:
    # The hazard record_stream exists for (same as CUDA): the block goes straight
    # back to the allocating stream, whose new work overwrites it before the
    # other stream's queued kernel has read it.
    with _used_on_other_stream(record=False) as (y, freed, using, _):
        z = torch.empty(LARGE, device="openreg")
        assert z.data_ptr() == freed
        z.fill_(-5.0)
        torch.openreg.current_stream().synchronize()  # the overwrite ran; y's kernel has not
    using.synchronize()
    assert_all(y, -10.0)


def test_record_stream_before_the_use_covers_the_work_queued_until_the_free():
    # The prefetcher pattern: record_stream first, then the work that uses the
    # tensor. As with CUDA, the stream's work is waited for up to the free.
    allocating, using = torch.openreg.current_stream(), torch.openreg.Stream()
    with torch.openreg.stream(using):
        _warm_signatures(LARGE)
    _warm_signatures(LARGE)
    torch.openreg.empty_cache()
    x = torch.ones(LARGE, device="openreg")
    x.mul_(3)
    using.wait_stream(allocating)
    x.record_stream(using)
    using.synchronize()  # nothing of ``using`` is pending when record_stream is called
    freed = x.data_ptr()
    with held_stream(using):
        with torch.openreg.stream(using):
            y = x * 2
        del x
        z = torch.empty(LARGE, device="openreg")
        assert z.data_ptr() != freed  # the block waits for ``using``'s queued read
        z.fill_(-5.0)
        allocating.synchronize()
    with torch.openreg.stream(using):
        assert_all(y, 6.0)
    assert_all(z, -5.0)


def test_record_stream_protects_private_pool_memory_alike():
    using = torch.openreg.Stream()
    with torch.openreg.stream(using):
        _warm_signatures(LARGE)
    _warm_signatures(LARGE)
    pool = torch.openreg.MemPool()
    with torch.openreg.use_mem_pool(pool):
        x = torch.full((LARGE,), 3.0, device="openreg")
        using.wait_stream(torch.openreg.current_stream())
        x.record_stream(using)
        using.synchronize()
        freed = x.data_ptr()
        with held_stream(using):
            with torch.openreg.stream(using):
                y = x * 2
            del x
            z = torch.empty(LARGE, device="openreg")
            assert z.data_ptr() != freed
            z.fill_(-5.0)
            torch.openreg.current_stream().synchronize()
    with torch.openreg.stream(using):
        assert_all(y, 6.0)
    assert_all(z, -5.0)


def _train_with_a_prefetcher(device: str, batches: list, hold_steps: bool) -> list[torch.Tensor]:
    """SGD fed by a CUDA-style data prefetcher: pinned batches copied with
    non_blocking=True on a side stream, ``wait_stream`` and ``record_stream`` on
    the compute stream before the step that uses them, the next batch fetched
    after the step was queued. The previous step has run when record_stream is
    called (as when a training loop logs its loss); with ``hold_steps`` a step
    then stays queued until the next batch has been fetched, which is when a
    batch freed too early is overwritten."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()

    if device == "cpu":
        for x, y in batches:
            step(x, y)
        return [p.detach().clone() for p in model.parameters()]
    side, current = torch.openreg.Stream(), torch.openreg.current_stream()

    def prefetch(index: int) -> tuple[torch.Tensor, ...] | None:
        if index == len(batches):
            return None
        with torch.openreg.stream(side):
            return tuple(t.pin_memory().to(device, non_blocking=True) for t in batches[index])

    following = prefetch(0)
    for index in range(len(batches)):
        current.wait_stream(side)
        batch, following = following, None
        for tensor in batch:
            tensor.record_stream(current)
        current.synchronize()  # the previous step has run (a loop logging its loss)
        hold = HeldStream(current) if hold_steps else None
        step(*batch)
        del batch, tensor
        following = prefetch(index + 1)
        if hold is not None:
            hold.close()
    return [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("hold_steps", [True, False])
def test_a_prefetcher_training_loop_matches_the_cpu(hold_steps: bool) -> None:
    torch.manual_seed(0)
    batches = [(torch.randn(64, 32), torch.randn(64, 4)) for _ in range(8)]
    expected = _train_with_a_prefetcher("cpu", batches, hold_steps=False)
    _train_with_a_prefetcher("openreg", batches[:2], hold_steps=False)  # plans every signature
    trained = _train_with_a_prefetcher("openreg", batches, hold_steps)
    for got, want in zip(trained, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_pinned_memory_recorded_on_a_stream_waits_for_its_work():
    # What a copy kernel tells the host allocator (at::HostAllocator::record_event):
    # the block is reused only once the stream's work queued by the free has run.
    stream = torch.openreg.Stream()
    pinned = torch.empty(SMALL, pin_memory=True)
    freed = pinned.data_ptr()
    with held_stream(stream):
        assert torch_openreg._C._host_record_event(pinned, stream.stream_id, stream.device_index)
        del pinned
        busy = torch.empty(SMALL, pin_memory=True)
        assert busy.data_ptr() != freed
    stream.synchronize()
    later = torch.empty(SMALL, pin_memory=True)
    assert later.data_ptr() == freed


def test_record_event_ignores_memory_that_is_not_pinned():
    stream = torch.openreg.Stream()
    assert not torch_openreg._C._host_record_event(
        torch.empty(SMALL), stream.stream_id, stream.device_index
    )


def test_record_stream_on_the_allocating_stream_is_harmless():
    _warm_signatures(SMALL)
    x = torch.full((SMALL,), 4.0, device="openreg")
    with held_stream():
        y = x * 2
        x.record_stream(torch.openreg.current_stream())
        del x
        z = torch.empty(SMALL, device="openreg")
        z.fill_(-1.0)
    assert_all(y, 8.0)
    assert_all(z, -1.0)


def test_record_stream_rejects_non_openreg_streams():
    x = torch.ones(4, device="openreg")
    with pytest.raises(RuntimeError):
        x.record_stream(torch.Stream(device="cpu"))


# --- empty_cache --------------------------------------------------------------------------


def test_empty_cache_while_work_is_pending_does_not_break_it():
    _warm_signatures(LARGE)
    torch.openreg.empty_cache()
    with held_stream() as held:
        a = torch.ones(LARGE, device="openreg")
        b = a * 2
        del a  # a's block is cached, still to be read by b's kernel
        reserved = torch.openreg.memory_reserved()
        held.release_soon()
        torch.openreg.empty_cache()
        assert held.released  # it waited for the queued work before releasing the block
    assert torch.openreg.memory_reserved() <= reserved - LARGE * 4
    c = torch.empty(LARGE, device="openreg")
    c.fill_(-1.0)
    assert_all(b, 2.0)
    assert_all(c, -1.0)


def test_empty_cache_with_recorded_use_pending_on_another_stream():
    with _used_on_other_stream(record=True) as (y, _, using, held):
        held.release_soon()
        torch.openreg.empty_cache()  # waits for the device, then releases x's block
        assert held.released
        assert using.query()
    z = torch.full((LARGE,), -5.0, device="openreg")
    assert_all(z, -5.0)
    assert_all(y, 6.0)


@pytest.mark.child_interpreters
def test_empty_cache_waits_for_the_device_without_holding_the_gil(run_python) -> None:
    # Queued work may need the GIL (here a Python function on the stream); empty_cache,
    # called from Python with the GIL held, waits for the device. Holding the GIL
    # through that wait deadlocked. The function is queued behind a hold released
    # once the host waits, so it cannot have run before empty_cache started waiting.
    # In a child process with a timeout: a regression fails instead of hanging.
    code = f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import openreg_runtime, torch, torch_openreg
        from _async import held_stream
        cached = torch.empty({LARGE}, device="openreg")
        del cached  # something for empty_cache to return
        ran = []
        with held_stream() as held:
            openreg_runtime.Stream.default().launch(lambda: ran.append(True))
            held.release_soon()
            torch.openreg.empty_cache()
        print(ran, torch.openreg.memory_reserved())
        """
    try:
        result = run_python(code, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("empty_cache deadlocked: it waited for the device while holding the GIL")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[True]", "0"]
