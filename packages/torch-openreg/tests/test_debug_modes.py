"""OPENREG_DEBUG: race detection, poisoned memory, chaos scheduling, the pytest plugin.

The catalogue below is a set of small buggy programs, each the kind of stream bug
that passes unnoticed on a CPU. Every one must be caught on every run: each is run
REPEATS times in a row and must be reported (or give the wrong value) each time,
with a report naming the fix; its corrected form must report nothing.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from _async import held_stream, warm
from conftest import clean_environment

import torch_openreg

debug = torch.openreg.debug
REPEATS = 30
N = 1 << 16  # elements: large enough that kernels take a while


@pytest.fixture
def races() -> Iterator[None]:
    """Race detection on, raising at the offending call; reports cleared after."""
    with debug.enabled("races", races="error"):
        yield
    debug.clear_race_reports()


@pytest.fixture
def poison() -> Iterator[None]:
    with debug.enabled("poison"):
        yield


def expect_race(program: Callable[[], object], *fix_words: str) -> None:
    for _ in range(REPEATS):
        with pytest.raises(RuntimeError, match="openreg stream race") as raised:
            program()
        for word in fix_words:
            assert word in str(raised.value), str(raised.value)
        torch.openreg.synchronize()


def expect_clean(program: Callable[[], object]) -> None:
    before = debug.race_report_count()
    for _ in range(REPEATS):
        program()
        torch.openreg.synchronize()
    assert debug.race_report_count() == before, debug.race_reports()[-1]


# ---- The catalogue: race detection -------------------------------------------------


def missing_wait_stream(fixed: bool = False) -> torch.Tensor:
    x = torch.ones(N, device="openreg")  # written on the default stream
    side = torch.openreg.Stream()
    if fixed:
        side.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(side):
        return x * 2  # reads x on the side stream


def test_missing_wait_stream_is_caught_every_time(races: None) -> None:
    expect_race(
        missing_wait_stream, "wait_stream", "read-after-write", "aten::mul", "missing_wait_stream"
    )


def test_wait_stream_fixes_it(races: None) -> None:
    expect_clean(lambda: missing_wait_stream(fixed=True))


# The programs that free memory give the freed tensor a size of its own, so the
# allocator's best fit hands exactly its block to the next tensor of that size.
FREED = N + 384


def missing_record_stream(fixed: bool = False) -> torch.Tensor:
    side = torch.openreg.Stream()
    x = torch.ones(FREED, device="openreg")
    side.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(side):
        y = x * 2  # x is used on the side stream...
    if fixed:
        x.record_stream(side)
    del x  # ...and freed on the default stream
    torch.zeros(FREED, device="openreg")  # reuses x's memory on the default stream
    return y


def test_missing_record_stream_is_caught_every_time(races: None) -> None:
    expect_race(missing_record_stream, "freed while in use", "record_stream")


def test_record_stream_fixes_it(races: None) -> None:
    expect_clean(lambda: missing_record_stream(fixed=True))


def use_after_del_on_main(fixed: bool = False) -> torch.Tensor:
    """A side stream's queued work still reads a tensor the main stream dropped."""
    side = torch.openreg.Stream()
    a = torch.randn(FREED + 128, device="openreg")
    b = torch.randn(N, device="openreg")
    side.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(side):
        a.sum()
    if fixed:
        torch.openreg.current_stream().wait_stream(side)
    del a
    c = torch.cat([b, b[:128]]) + 1  # a's size: its output takes a's memory on the main stream
    return c


def test_use_on_side_stream_after_del_is_caught_every_time(races: None) -> None:
    expect_race(use_after_del_on_main, "freed while in use", "record_stream")


def test_waiting_before_del_fixes_it(races: None) -> None:
    expect_clean(lambda: use_after_del_on_main(fixed=True))


def gradient_hook_on_side_stream(fixed: bool = False) -> torch.Tensor:
    """DDP-style: a gradient hook reduces the gradient on a communication stream."""
    model = torch.nn.Linear(64, 64).to("openreg")
    comm = torch.openreg.Stream()
    reduced: list[torch.Tensor] = []

    def hook(grad: torch.Tensor) -> torch.Tensor:
        if fixed:
            comm.wait_stream(torch.openreg.current_stream())
        with torch.openreg.stream(comm):
            reduced.append(grad * 0.5)
        return grad

    model.weight.register_hook(hook)
    model(torch.randn(8, 64, device="openreg")).sum().backward()
    torch.openreg.synchronize()
    return reduced[0]


def test_gradient_hook_on_side_stream_is_caught_every_time(races: None) -> None:
    expect_race(gradient_hook_on_side_stream, "wait_stream", "hook")


def test_waiting_in_the_hook_fixes_it(races: None) -> None:
    expect_clean(lambda: gradient_hook_on_side_stream(fixed=True))


def test_event_and_synchronize_order_streams(races: None) -> None:
    def with_event() -> None:
        x = torch.ones(N, device="openreg")
        event = torch.openreg.current_stream().record_event()
        side = torch.openreg.Stream()
        side.wait_event(event)
        with torch.openreg.stream(side):
            x.add_(1)

    def with_synchronize() -> None:
        x = torch.ones(N, device="openreg")
        torch.openreg.current_stream().synchronize()
        with torch.openreg.stream(torch.openreg.Stream()):
            x.add_(1)

    def with_item() -> None:
        x = torch.ones(N, device="openreg")
        x.sum().item()  # waits for the default stream
        with torch.openreg.stream(torch.openreg.Stream()):
            x.add_(1)

    for program in (with_event, with_synchronize, with_item):
        expect_clean(program)


def test_write_after_read_across_streams_is_caught(races: None) -> None:
    def program() -> None:
        x = torch.ones(N, device="openreg")
        side = torch.openreg.Stream()
        side.wait_stream(torch.openreg.current_stream())
        with torch.openreg.stream(side):
            x.sum()
        x.fill_(3)  # the default stream overwrites what the side stream may still read

    expect_race(program, "write-after-read", "aten::fill_")


def test_disjoint_halves_on_two_streams_do_not_race(races: None) -> None:
    def program() -> None:
        x = torch.zeros(2, N, device="openreg")
        torch.openreg.synchronize()
        side = torch.openreg.Stream()
        x[0].fill_(1)
        with torch.openreg.stream(side):
            x[1].fill_(2)

    expect_clean(program)


# ---- Collectives, compiled kernels, the custom operator ------------------------------


@pytest.fixture
def world_of_one() -> Iterator[None]:
    """A single-rank orgloo group in this process: its collectives run like any other."""
    dist.init_process_group("orgloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def all_reduce_then_side_stream(fix: str | None = None) -> torch.Tensor:
    x = torch.ones(N, device="openreg")
    torch.openreg.synchronize()  # only the collective's write can race below
    side = torch.openreg.Stream()
    work = dist.all_reduce(x, async_op=True)  # writes x, issued on the default stream
    if fix == "work.wait":
        with torch.openreg.stream(side):
            work.wait()  # the side stream waits for the collective
    elif fix == "wait_stream":
        work.wait()  # the default stream waits for the collective...
        side.wait_stream(torch.openreg.current_stream())  # ...and the side stream for it
    with torch.openreg.stream(side):
        return x * 2


def test_all_reduce_result_on_another_stream_is_caught(races: None, world_of_one: None) -> None:
    expect_race(all_reduce_then_side_stream, "read-after-write", "orgloo all_reduce", "wait_stream")
    expect_clean(lambda: all_reduce_then_side_stream("work.wait"))
    expect_clean(lambda: all_reduce_then_side_stream("wait_stream"))


def all_gather_input_overwritten(fixed: bool = False) -> None:
    """The collective reads its input on the default stream; a side stream overwrites it."""
    part = torch.ones(N, device="openreg")
    whole = torch.empty(N, device="openreg")
    torch.openreg.synchronize()
    side = torch.openreg.Stream()
    work = dist.all_gather_into_tensor(whole, part, async_op=True)
    if fixed:
        with torch.openreg.stream(side):
            work.wait()
    with torch.openreg.stream(side):
        part.fill_(2)


def test_collective_input_overwritten_on_another_stream_is_caught(
    races: None, world_of_one: None
) -> None:
    expect_race(all_gather_input_overwritten, "write-after-read", "orgloo all_gather_into_tensor")
    expect_clean(lambda: all_gather_input_overwritten(fixed=True))


@pytest.fixture(scope="module")
def compiled_affine() -> Callable[[torch.Tensor], torch.Tensor]:
    """One compiled pointwise kernel (reads its input, writes a new output), compiled once."""
    function = torch.compile(lambda t: t * 2 + 1, dynamic=False)
    function(torch.ones(N, device="openreg"))
    torch.openreg.synchronize()
    return function


def compiled_reads_eager_write(
    compiled: Callable[[torch.Tensor], torch.Tensor], fixed: bool = False
) -> torch.Tensor:
    x = torch.ones(N, device="openreg")  # eager write on the default stream
    side = torch.openreg.Stream()
    if fixed:
        side.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(side):
        return compiled(x)  # the compiled kernel reads x on the side stream


def eager_reads_compiled_output(
    compiled: Callable[[torch.Tensor], torch.Tensor], fixed: bool = False
) -> torch.Tensor:
    x = torch.ones(N, device="openreg")
    side = torch.openreg.Stream()
    side.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(side):
        y = compiled(x)  # the compiled kernel writes y on the side stream
    if fixed:
        torch.openreg.current_stream().wait_stream(side)
    return y + 1  # eager read on the default stream


def test_compiled_kernel_racing_with_eager_work_is_caught(
    races: None, compiled_affine: Callable[[torch.Tensor], torch.Tensor]
) -> None:
    expect_race(
        lambda: compiled_reads_eager_write(compiled_affine),
        "read-after-write",
        "this access: compiled kernel",
        "wait_stream",
    )
    expect_race(
        lambda: eager_reads_compiled_output(compiled_affine),
        "read-after-write",
        "previous access: compiled kernel",
    )
    expect_clean(lambda: compiled_reads_eager_write(compiled_affine, fixed=True))
    expect_clean(lambda: eager_reads_compiled_output(compiled_affine, fixed=True))


def swish_on_side_stream(fixed: bool = False) -> torch.Tensor:
    x = torch.ones(N, device="openreg")
    side = torch.openreg.Stream()
    if fixed:
        side.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(side):
        return torch.ops.openreg.swish(x)


def test_custom_operator_racing_is_caught(races: None) -> None:
    expect_race(swish_on_side_stream, "read-after-write", "openreg::swish", "wait_stream")
    expect_clean(lambda: swish_on_side_stream(fixed=True))


# ---- Reused memory -----------------------------------------------------------------


def test_freed_tensor_is_reported_once_not_against_later_ordered_work() -> None:
    """A missing record_stream is one report, at the new owner's first access; the
    freed tensor's accesses are not held against the new owner's later, ordered work."""
    with debug.enabled("races", races="error"):
        for _ in range(REPEATS):
            side = torch.openreg.Stream()
            x = torch.ones(FREED, device="openreg")
            side.wait_stream(torch.openreg.current_stream())
            with torch.openreg.stream(side):
                x.sum()
            del x  # missing record_stream: reported at the zeros below (report mode)...
            with debug.enabled(races="report"), pytest.warns(UserWarning, match="freed while"):
                reused = torch.zeros(FREED, device="openreg")
            other = torch.openreg.Stream()
            other.wait_stream(torch.openreg.current_stream())
            with torch.openreg.stream(other):
                reused.add_(1)  # ...but this write is ordered after the zeros: no report
                reused.mul_(2)
            torch.openreg.current_stream().wait_stream(other)
            reused.sum()
            torch.openreg.synchronize()
    debug.clear_race_reports()


@pytest.fixture
def broken_allocator(request: pytest.FixtureRequest) -> Iterator[None]:
    """The caching allocator breaks one of its reuse rules on purpose (a test-only hook)."""
    torch_openreg._C._set_allocator_fault(request.param)
    yield
    torch_openreg._C._set_allocator_fault("none")


def empty_the_cache() -> None:
    """No cached free block (left by earlier tests or the warm-up, possibly still being
    released by a worker): the block the test frees is then the only one the allocator
    can hand out for a request of its size, whatever the timing."""
    torch.openreg.synchronize()
    torch.openreg.empty_cache()


def reuse_despite_record_stream() -> None:
    """A correct program: x is recorded on the stream that still reads it."""
    using = torch.openreg.Stream()
    x = torch.ones(FREED, device="openreg")
    warm(lambda t=x: t * 2)  # a first call would wait for the held stream
    empty_the_cache()
    using.wait_stream(torch.openreg.current_stream())
    with held_stream(using):
        with torch.openreg.stream(using):
            x * 2  # queued: reads x later
        x.record_stream(using)
        del x
        torch.zeros(FREED, device="openreg")  # x's memory, if the allocator does not wait


@pytest.mark.parametrize("broken_allocator", ["ignore_recorded_streams"], indirect=True)
def test_memory_reused_under_recorded_work_is_caught_without_trusting_the_allocator(
    races: None, broken_allocator: None
) -> None:
    expect_race(
        reuse_despite_record_stream, "memory reused while in use", "record_stream", "bug in openreg"
    )


def test_the_same_program_is_clean_with_the_allocator_intact(races: None) -> None:
    expect_clean(reuse_despite_record_stream)


# float32 elements: a size no other test uses, so the freed block of that size is
# the allocator's best fit for the kernel's allocation.
KERNEL_SIDE = (4 << 20) + 4096


def kernel_allocating_under_queued_work() -> tuple[torch.Tensor, torch.Tensor]:
    """sum(dtype=float32) of an int tensor casts it to a float temporary inside its
    kernel, while a read of the freed ``a`` is still queued behind it."""
    xi = torch.randint(0, 100, (KERNEL_SIDE,), dtype=torch.int32, device="openreg")
    a = torch.full((KERNEL_SIDE,), 5.0, device="openreg")
    warm(lambda: torch.sum(xi, dtype=torch.float32), lambda t=a: t * 2)
    empty_the_cache()  # the warm-up's freed blocks are not there to serve the kernel
    with held_stream():
        total = torch.sum(xi, dtype=torch.float32)  # allocates while it runs
        doubled = a * 2  # queued behind it: reads a
        del a
    del total
    return doubled, torch.full((KERNEL_SIDE,), 10.0)


@pytest.mark.parametrize("broken_allocator", ["kernels_ignore_queued_work"], indirect=True)
def test_a_kernel_given_memory_that_queued_work_uses_is_caught(broken_allocator: None) -> None:
    with debug.enabled("races", races="report"):
        debug.clear_race_reports()
        doubled, expected = kernel_allocating_under_queued_work()
        torch.openreg.synchronize()
        reports = debug.race_reports()
    debug.clear_race_reports()
    assert not torch.equal(doubled.cpu(), expected)  # the broken allocator did corrupt it
    assert any(
        "memory reused while in use" in report
        and "a kernel allocating while it runs" in report
        and "aten::mul.Tensor reads the freed tensor" in report
        and "bug in openreg" in report
        for report in reports
    ), reports


def test_a_kernel_allocating_under_queued_work_is_clean_with_the_allocator_intact() -> None:
    with debug.enabled("races", races="error"):
        doubled, expected = kernel_allocating_under_queued_work()
        torch.openreg.synchronize()
    torch.testing.assert_close(doubled.cpu(), expected, rtol=0, atol=0)


def test_rank_processes_inherit_the_debug_modes(monkeypatch: pytest.MonkeyPatch) -> None:
    import _distributed

    monkeypatch.setenv("OPENREG_DEBUG", "races")
    monkeypatch.setenv("OPENREG_DEBUG_RACES", "error")
    monkeypatch.setenv("OPENREG_DEBUG_SEED", "7")
    monkeypatch.setenv("OPENREG_FAULTS", "1")  # other OpenReg switches stay behind
    env = _distributed.clean_environment(RANK="0")
    assert env["OPENREG_DEBUG"] == "races" and env["OPENREG_DEBUG_RACES"] == "error"
    assert env["OPENREG_DEBUG_SEED"] == "7" and env["RANK"] == "0"
    assert "OPENREG_FAULTS" not in env


def test_report_mode_warns_and_keeps_the_report() -> None:
    debug.clear_race_reports()
    with (
        debug.enabled("races", races="report"),
        pytest.warns(UserWarning, match="openreg stream race"),
    ):
        missing_wait_stream()
    torch.openreg.synchronize()
    reports = debug.race_reports()
    assert debug.race_report_count() == 1
    report = reports[0]
    assert "tensor: shape [65536], dtype Float, device openreg:0" in report
    assert "this access: aten::mul.Tensor reads it on stream" in report
    assert (
        "previous access: aten::fill_.Scalar wrote it on the default stream of openreg:0" in report
    )
    assert "test_debug_modes.py" in report and "in missing_wait_stream" in report
    assert "torch.openreg.default_stream(0)" in report
    debug.clear_race_reports()
    assert debug.race_report_count() == 0


def test_nothing_is_checked_when_off() -> None:
    debug.clear_race_reports()
    with debug.enabled():
        debug.disable("races")
        missing_wait_stream()
        torch.openreg.synchronize()
    assert debug.race_report_count() == 0


# ---- Poisoned memory ------------------------------------------------------------------


def test_empty_is_poisoned(poison: None) -> None:
    for dtype in (
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.float64,
        torch.int32,
        torch.int64,
    ):
        t = torch.empty(1000, dtype=dtype, device="openreg")
        assert debug.poison_mask(t).all(), dtype
        assert debug.is_poisoned(t)
    assert torch.empty(10, device="openreg").isnan().all()
    assert (torch.empty(10, dtype=torch.int64, device="openreg") == INT64_POISON).all()


# What a poisoned element of each integer type holds (docs/debug-modes.md): a value that
# cannot pass as data. The signed types get their minimum, except int64: two int64
# minimums add up to exactly 0, so it gets the 64-bit golden-ratio constant as a signed
# number, whose multiples stay far from 0 (and from any count or index) for sums of up
# to a million elements.
INT64_POISON = -0x61C8864680B583EB
SIGNED_POISON = {
    torch.int8: -(2**7),
    torch.int16: -(2**15),
    torch.int32: -(2**31),
    torch.int64: INT64_POISON,
}


def test_poisoned_integers_hold_values_no_data_holds(poison: None) -> None:
    for dtype, value in SIGNED_POISON.items():
        for t in (
            torch.empty(100, dtype=dtype, device="openreg"),
            torch.empty_strided((4, 3), (1, 5), dtype=dtype, device="openreg"),
            torch.empty_like(torch.zeros(7, dtype=dtype, device="openreg")),
            torch.zeros(1, dtype=dtype, device="openreg").new_empty(9),
        ):
            assert (t.cpu() == value).all(), (dtype, t.cpu())
            assert debug.poison_mask(t).all(), dtype
    for dtype in (torch.uint8, torch.uint16, torch.uint32, torch.uint64, torch.bool):
        raw = torch.empty(10, dtype=dtype, device="openreg").cpu().view(torch.uint8)
        assert (raw == 255).all(), dtype  # the maximum; True as an invalid byte for bool


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32], ids=str)
def test_indexing_with_a_poisoned_index_raises(poison: None, dtype: torch.dtype) -> None:
    source = torch.arange(1000.0, device="openreg")
    for index in (lambda i: source[i], lambda i: torch.index_select(source, 0, i)):
        with pytest.raises((IndexError, RuntimeError), match=r"out of (range|bounds)"):
            index(torch.empty(3, dtype=dtype, device="openreg"))
            torch.openreg.synchronize()  # a queued kernel raises here
        torch.openreg.synchronize()


@pytest.mark.parametrize("count", [1, 2, 3, 4, 1000, 4096])
@pytest.mark.parametrize("dtype", list(SIGNED_POISON), ids=str)
def test_sums_of_poisoned_integers_are_far_from_any_plausible_value(
    poison: None, dtype: torch.dtype, count: int
) -> None:
    total = torch.empty(count, dtype=dtype, device="openreg").sum().item()
    if dtype == torch.int64:
        assert abs(total) > 10**12, total  # int64 sums wrap: never near 0, a count or an index
    else:
        assert total == count * SIGNED_POISON[dtype]  # summed in int64: no wrap
    # A count that should have started at zero does not pass for one either.
    counts = torch.empty(count, dtype=dtype, device="openreg")
    counts += 1
    assert (counts.cpu().abs() > 100).all(), counts.cpu()


def test_poisoned_floats_are_nan_in_every_float_type(poison: None) -> None:
    dtypes = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
    float8 = (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)
    for dtype in dtypes + float8:
        t = torch.empty(16, dtype=dtype, device="openreg")
        assert t.cpu().float().isnan().all(), dtype  # the fnuz types' NaN is 0x80, not 0xFF
        assert debug.poison_mask(t).all(), dtype
    for dtype in (torch.complex64, torch.complex128):
        assert torch.empty(4, dtype=dtype, device="openreg").cpu().isnan().all(), dtype


def test_without_poison_new_memory_is_left_as_it_was() -> None:
    with debug.enabled():
        debug.disable("poison")
        for dtype in (torch.int64, torch.float32):
            t = torch.full((4096,), 7, dtype=dtype, device="openreg")
            address = t.data_ptr()
            del t
            u = torch.empty(4096, dtype=dtype, device="openreg")
            assert u.data_ptr() == address  # the same block, handed out again
            assert (u.cpu() == 7).all(), dtype  # nothing filled it
            assert not debug.is_poisoned(u)


def test_reliance_on_empty_contents_gives_nan_every_time(poison: None) -> None:
    x = torch.arange(1000.0, device="openreg")
    for _ in range(REPEATS):
        total = torch.empty(1000, device="openreg")  # bug: should be zeros
        total += x
        assert total.isnan().all()


def test_reused_memory_is_poisoned_again(poison: None) -> None:
    for _ in range(REPEATS):
        t = torch.full((4096,), 5.0, device="openreg")
        address = t.data_ptr()
        del t
        u = torch.empty(4096, device="openreg")
        assert u.data_ptr() == address  # same block, handed out again
        assert debug.poison_mask(u).all()


def test_written_tensors_are_not_poisoned(poison: None) -> None:
    x = torch.randn(100, device="openreg")
    assert not debug.is_poisoned(x)
    assert not debug.is_poisoned(torch.zeros(3, 3, device="openreg"))
    assert not debug.is_poisoned(x.cpu())
    y = x.cpu() * 2
    torch.testing.assert_close((x * 2).cpu(), y)


def test_pinned_memory_is_poisoned(poison: None) -> None:
    t = torch.empty(100, pin_memory=True, device="cpu")
    assert t.is_pinned() and debug.poison_mask(t).all()


def test_poison_mask_of_bool_and_complex(poison: None) -> None:
    assert debug.poison_mask(torch.empty(4, dtype=torch.bool, device="openreg")).all()
    assert debug.poison_mask(torch.empty(4, dtype=torch.complex64, device="openreg")).all()
    assert not debug.poison_mask(torch.zeros(4, dtype=torch.complex64, device="openreg")).any()
    with pytest.raises(TypeError, match="expects a tensor"):
        debug.poison_mask([1, 2])  # type: ignore[arg-type]


# ---- Switches and the Python API -------------------------------------------------------


def test_modes_api_round_trip() -> None:
    initial = debug.get_modes()  # nox -s checked runs the suite with modes on
    debug.set_modes()
    assert debug.get_modes() == frozenset()
    with debug.enabled("poison", "races"):
        assert debug.get_modes() == {"poison", "races"}
        debug.disable("poison")
        assert debug.get_modes() == {"races"}
    assert debug.get_modes() == frozenset()
    debug.set_modes(*initial)
    with pytest.raises(ValueError, match=r"unknown openreg debug mode.*'race'.*choose from"):
        debug.set_modes("race")
    with pytest.raises(ValueError, match="race action must be one of"):
        debug.set_race_action("raise")
    assert debug.chaos_seed() is None


def run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=clean_environment(**env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_environment_switches_modes_on_and_validates() -> None:
    shown = run(
        "import torch, torch_openreg; print(sorted(torch.openreg.debug.get_modes()), "
        "torch.openreg.debug.get_race_action())",
        OPENREG_DEBUG="races, poison",
        OPENREG_DEBUG_RACES="error",
    )
    assert shown.returncode == 0, shown.stderr
    assert "['poison', 'races'] error" in shown.stdout
    bad = run("import torch, torch_openreg", OPENREG_DEBUG="races,posion")
    assert bad.returncode != 0
    assert "OPENREG_DEBUG='races,posion' is invalid: 'posion' is not a debug mode" in bad.stderr
    assert "'races'" in bad.stderr and "'poison'" in bad.stderr and "'chaos'" in bad.stderr
    bad_action = run("import torch, torch_openreg", OPENREG_DEBUG_RACES="warn")
    assert bad_action.returncode != 0 and "use one of 'report', 'error'" in bad_action.stderr


def test_report_mode_prints_a_summary_at_exit() -> None:
    result = run(
        """
        import torch, torch_openreg, warnings
        warnings.simplefilter("ignore")
        x = torch.ones(1000, device="openreg")
        with torch.openreg.stream(torch.openreg.Stream()):
            y = x + 1
        """,
        OPENREG_DEBUG="races",
    )
    assert result.returncode == 0, result.stderr
    assert "openreg: 1 stream race(s) reported in this process" in result.stderr
    assert "fix: before this call" in result.stderr


# ---- Chaos scheduling -------------------------------------------------------------------

NON_BLOCKING_READ = """
import torch, torch_openreg
wrong = 0
for _ in range({repeats}):
    x = torch.full((1 << 16,), 7.0, device="openreg")
    host = x.to("cpu", non_blocking=True)
    assert host.is_pinned()
    early = host[0].item()  # bug: read before synchronizing
    torch.openreg.synchronize()
    wrong += early != 7.0
    assert host[0].item() == 7.0
print("wrong", wrong)
"""


def test_non_blocking_copy_read_early_is_wrong_every_time() -> None:
    result = run(
        NON_BLOCKING_READ.format(repeats=REPEATS),
        OPENREG_DEBUG="chaos,poison",
        OPENREG_DEBUG_SEED="7",
    )
    assert result.returncode == 0, result.stderr
    assert f"wrong {REPEATS}" in result.stdout
    assert "chaos scheduling with seed 7 (replay with OPENREG_DEBUG_SEED=7)" in result.stderr


MISSING_WAIT_UNDER_CHAOS = """
import torch, torch_openreg
outcomes = []
side = torch.openreg.Stream()
for i in range(1, 41):
    x = torch.full((1 << 14,), float(i), device="openreg")  # a new value each time
    with torch.openreg.stream(side):
        y = x * 2  # bug: no side.wait_stream(...)
    torch.openreg.synchronize()
    outcomes.append("R" if y[0].item() == 2 * i else "W")  # right or wrong
print("outcomes", "".join(outcomes))
"""


def test_chaos_outcome_is_replayed_by_its_seed() -> None:
    runs = [
        run(MISSING_WAIT_UNDER_CHAOS, OPENREG_DEBUG="chaos", OPENREG_DEBUG_SEED="12345")
        for _ in range(2)
    ]
    for result in runs:
        assert result.returncode == 0, result.stderr
    first, second = (r.stdout.split("outcomes ")[1].strip() for r in runs)
    assert "W" in first  # the bug shows as a wrong value (x read before it was filled)
    assert first == second


def test_correct_programs_stay_correct_under_chaos() -> None:
    result = run(
        """
        import torch, torch_openreg
        side = torch.openreg.Stream()
        for _ in range(30):
            x = torch.arange(4096.0, device="openreg")
            side.wait_stream(torch.openreg.current_stream())
            with torch.openreg.stream(side):
                y = x * 2
            torch.openreg.current_stream().wait_stream(side)
            host = (y + 1).to("cpu", non_blocking=True)
            torch.openreg.synchronize()
            assert torch.equal(host, torch.arange(4096.0) * 2 + 1)
        print("ok")
        """,
        OPENREG_DEBUG="chaos",
    )
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout


MAX_SEED = 2**64 - 1  # the runtime's seeds: unsigned 64-bit, 0 meaning "choose one"


def test_set_chaos_seed_takes_exactly_the_runtime_range() -> None:
    with debug.enabled("chaos"):
        debug.set_chaos_seed(MAX_SEED)
        assert debug.chaos_seed() == MAX_SEED
        for seed in (0, -5, MAX_SEED + 1, True, 5.0, "5"):
            with pytest.raises(ValueError, match=f"an integer from 1 to {MAX_SEED}.*got"):
                debug.set_chaos_seed(seed)  # type: ignore[arg-type]
        assert debug.chaos_seed() == MAX_SEED


# ---- The pytest plugin --------------------------------------------------------------------


def test_pytest_plugin_fails_a_racing_test(tmp_path: pytest.TempPathFactory) -> None:
    test_file = tmp_path / "test_user.py"  # type: ignore[operator]
    test_file.write_text(
        textwrap.dedent(
            """
            import torch, torch_openreg

            def test_racy():
                x = torch.ones(1000, device="openreg")
                with torch.openreg.stream(torch.openreg.Stream()):
                    (x + 1).sum()

            def test_correct():
                x = torch.ones(1000, device="openreg")
                assert torch.isnan(torch.empty(3, device="openreg")).all()
                side = torch.openreg.Stream()
                side.wait_stream(torch.openreg.current_stream())
                with torch.openreg.stream(side):
                    (x + 1).sum()
            """
        )
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "torch_openreg.pytest_plugin",
            "--openreg-debug=races,poison",
            "-W",
            "ignore::UserWarning",
            str(test_file),
        ],
        env=clean_environment(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=str(tmp_path),
    )
    assert "1 failed, 1 passed" in result.stdout, result.stdout + result.stderr
    assert "openreg reported 1 stream race(s) during this test" in result.stdout
    assert "openreg debug modes: poison,races" in result.stdout


def run_pytest_with_seed(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    test_file = tmp_path / "test_seeded.py"
    test_file.write_text("def test_nothing():\n    pass\n")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "torch_openreg.pytest_plugin", *options,
         str(test_file)],
        env=clean_environment(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=str(tmp_path),
    )  # fmt: skip


def test_pytest_plugin_takes_a_seed_by_the_rule_of_openreg_debug_seed(
    tmp_path: Path,
) -> None:
    result = run_pytest_with_seed(
        tmp_path, "--openreg-debug=chaos", f"--openreg-debug-seed={MAX_SEED}"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"openreg debug modes: chaos (chaos seed {MAX_SEED})" in result.stdout


@pytest.mark.parametrize("seed", [" -5", "+5", "1_000", str(MAX_SEED + 1)])
def test_pytest_plugin_refuses_a_seed_openreg_debug_seed_would_refuse(
    tmp_path: Path, seed: str
) -> None:
    result = run_pytest_with_seed(tmp_path, "--openreg-debug=chaos", f"--openreg-debug-seed={seed}")
    assert result.returncode == 4, result.stdout + result.stderr  # pytest's usage error
    assert "Traceback" not in result.stderr and "INTERNALERROR" not in result.stdout + result.stderr
    assert f"--openreg-debug-seed={seed!r} is invalid" in result.stderr
    assert f"from 1 to {MAX_SEED}" in result.stderr


def test_pytest_plugin_refuses_a_seed_without_chaos(tmp_path: Path) -> None:
    result = run_pytest_with_seed(tmp_path, "--openreg-debug-seed=7")
    assert result.returncode == 4, result.stdout + result.stderr
    assert "--openreg-debug-seed needs chaos in --openreg-debug" in result.stderr
