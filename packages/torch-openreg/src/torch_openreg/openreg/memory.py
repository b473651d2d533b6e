"""Device memory statistics and management (mirrors torch.cuda.memory).

Backed by the binding's c10::DeviceAllocator through torch.accelerator, so
``torch.openreg.memory_allocated()`` and ``torch.accelerator.memory_allocated()``
report the same numbers. What c10's interface has no word for — the memory
fraction, raw allocations, private pools, pinned host memory statistics —
comes from the binding directly.
"""

from __future__ import annotations

import collections
import contextlib
import pickle
import sys
from collections.abc import Iterator
from typing import Any

import torch

from .. import _C
from ._fork import _lazy_init
from ._utils import DeviceLike, _get_device_index


def _index(device: DeviceLike) -> int:
    """The device a memory call is about.

    Raises, as every device call does, in a child forked after the parent used a
    device: the allocator's state there is the parent's, copied by ``fork``.
    """
    _lazy_init()
    return _get_device_index(device, optional=True)


def memory_stats_as_nested_dict(device: DeviceLike = None) -> dict[str, Any]:
    """:func:`memory_stats` as a nested dictionary (like torch.cuda's).

    Includes ``reserved_bytes_by_private_pools``: for each :class:`MemPool` id,
    the reserved bytes of its segments (``all``/``small_pool``/``large_pool``).
    """
    index = _index(device)
    stats = dict(torch._C._accelerator_getDeviceStats(index))
    stats.setdefault("reserved_bytes_by_private_pools", _C._private_pool_stats(index))
    return stats


def _flatten(result: list[tuple[str, Any]], prefix: str, value: Any) -> None:
    if isinstance(value, dict):
        for key, nested in value.items():
            # Pool ids (0, n) become "0_n", as in torch.cuda.memory_stats.
            name = "_".join(str(part) for part in key) if isinstance(key, tuple) else str(key)
            _flatten(result, f"{prefix}.{name}" if prefix else name, nested)
    else:
        result.append((prefix, value))


def memory_stats(device: DeviceLike = None) -> dict[str, Any]:
    """Allocator statistics of ``device``, with torch.cuda's key names (flat, sorted)."""
    result: list[tuple[str, Any]] = []
    _flatten(result, "", memory_stats_as_nested_dict(device))
    return collections.OrderedDict(sorted(result))


def memory_allocated(device: DeviceLike = None) -> int:
    """Bytes currently occupied by tensors on ``device``."""
    return torch.accelerator.memory_allocated(_index(device))


def max_memory_allocated(device: DeviceLike = None) -> int:
    """Peak of :func:`memory_allocated` since the start or the last reset."""
    return torch.accelerator.max_memory_allocated(_index(device))


def memory_reserved(device: DeviceLike = None) -> int:
    """Bytes held by the allocator on ``device`` (in use or cached)."""
    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device: DeviceLike = None) -> int:
    """Peak of :func:`memory_reserved` since the start or the last reset."""
    return torch.accelerator.max_memory_reserved(_index(device))


def reset_peak_memory_stats(device: DeviceLike = None) -> None:
    """Reset the peak statistics of ``device``."""
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: DeviceLike = None) -> None:
    """Reset the accumulated (allocated/freed totals) statistics of ``device``."""
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def empty_cache() -> None:
    """Return cached device memory to the runtime."""
    _lazy_init()
    torch.accelerator.empty_cache()


def mem_get_info(device: DeviceLike = None) -> tuple[int, int]:
    """(free, total) bytes of ``device`` as the runtime sees them."""
    free, total = _C._mem_get_info(_index(device))
    return free, total


def set_per_process_memory_fraction(fraction: float, device: DeviceLike = None) -> None:
    """Limit the caching allocator to ``fraction`` of ``device``'s capacity (like torch.cuda).

    The allocator then never holds more than ``fraction * total`` bytes on the
    device: an allocation that would need more (after returning cached memory)
    raises ``torch.OutOfMemoryError`` naming the fraction. Memory it already
    holds is not given back.
    """
    if not isinstance(fraction, float):
        raise TypeError(
            f"Invalid type for fraction argument, must be `float` (got {type(fraction).__name__})"
        )
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _C._set_memory_fraction(fraction, _index(device))


def get_per_process_memory_fraction(device: DeviceLike = None) -> float:
    """The fraction set by :func:`set_per_process_memory_fraction` (1.0 if none)."""
    return _C._get_memory_fraction(_index(device))


def caching_allocator_alloc(
    size: int, device: DeviceLike = None, stream: torch.Stream | int | None = None
) -> int:
    """Allocate ``size`` bytes from the caching allocator; returns the device address.

    For interoperability with other frameworks, as torch.cuda's. The memory is
    allocated for ``stream`` (default: the current stream of ``device``; an int
    is a raw stream handle, 0 the default stream) and stays allocated until
    :func:`caching_allocator_delete`. The address is device memory: host code
    must not dereference it.
    """
    index = _index(device)
    if stream is None:
        stream = torch.accelerator.current_stream(index)
    if isinstance(stream, torch.Stream):
        if stream.device.type != "openreg":
            raise TypeError(f"caching_allocator_alloc: expected an openreg stream, got {stream}")
        stream = _C._stream_handle(stream.stream_id, stream.device_index)
    if not isinstance(stream, int):
        raise TypeError(
            "Invalid type for stream argument, must be `torch.openreg.Stream` or `int` "
            f"representing a stream handle (got {type(stream).__name__})"
        )
    return _C._caching_allocator_alloc(size, index, stream)


def caching_allocator_delete(mem_ptr: int) -> None:
    """Free memory allocated with :func:`caching_allocator_alloc` (stream-ordered)."""
    _lazy_init()
    _C._caching_allocator_delete(mem_ptr)


class MemPool(_C._MemPool):
    """A private pool of the openreg caching allocator (like torch.cuda.MemPool).

    Allocations made inside :func:`use_mem_pool` come from the pool's own
    segments, which serve nothing else. The pool is released when the last
    reference to it goes: its unused memory returns to the device then, and
    memory still allocated from it returns with the next :func:`empty_cache`
    once its tensors are freed (as with CUDA).

    Args:
        allocator: must be ``None``: openreg has no pluggable allocators.
        use_on_oom: other allocations may use the pool's free memory when the
            device is otherwise out of memory.
        no_split: never cut a block of the pool, so two allocations never share
            a segment.
    """

    def __init__(
        self, allocator: object | None = None, use_on_oom: bool = False, no_split: bool = False
    ) -> None:
        if allocator is not None:
            raise ValueError(
                "openreg has no pluggable allocators: create MemPool with allocator=None"
            )
        _lazy_init()
        super().__init__(use_on_oom, no_split)

    @property
    def allocator(self) -> None:
        """Always None: the pool uses the caching allocator itself."""
        return None


@contextlib.contextmanager
def use_mem_pool(pool: MemPool, device: DeviceLike = None) -> Iterator[None]:
    """Route this thread's allocations on ``device`` to ``pool`` (like torch.cuda.use_mem_pool).

    Only the calling thread is affected (threads it starts are not). Kernels
    enqueued in the scope allocate their temporaries outside the pool.
    """
    index = _index(device)
    pool._begin_allocate(index)
    try:
        yield
    finally:
        pool._end_allocate(index)


def host_memory_stats_as_nested_dict() -> dict[str, Any]:
    """Pinned host memory statistics (``pin_memory()``), as torch.cuda's, nested."""
    return _C._host_memory_stats()


def host_memory_stats() -> dict[str, Any]:
    """Pinned host memory statistics, flat and sorted (like torch.cuda.host_memory_stats).

    ``allocations``/``allocated_bytes``: blocks the host allocator owns (in use
    or cached); ``active_requests``/``active_bytes``: blocks handed out; each
    with ``current``, ``peak``, ``allocated`` and ``freed``. ``num_host_alloc``/
    ``num_host_free``: runtime calls; ``host_alloc_time``/``host_free_time``:
    their durations in microseconds (``total``, ``max``, ``min``, ``count``,
    ``avg``). Sizes are rounded up to a power of two.
    """
    result: list[tuple[str, Any]] = []
    _flatten(result, "", host_memory_stats_as_nested_dict())
    return collections.OrderedDict(sorted(result))


def reset_accumulated_host_memory_stats() -> None:
    """Reset the accumulated host statistics: ``allocated``/``freed``, call counts and times."""
    _C._reset_accumulated_host_memory_stats()


def reset_peak_host_memory_stats() -> None:
    """Reset the host statistics' peaks to their current values (and min/max call times)."""
    _C._reset_peak_host_memory_stats()


# memory_summary: one row per statistic (and per pool unless abbreviated), with
# the four figures c10 keeps for each: current, peak, total allocated, total freed.
_SUMMARY_ROWS: tuple[tuple[str, str, bool], ...] = (
    # (memory_stats key prefix, row label, is a byte count)
    ("allocated_bytes", "Allocated memory", True),
    ("active_bytes", "Active memory", True),
    ("requested_bytes", "Requested memory", True),
    ("reserved_bytes", "Reserved memory (segments)", True),
    ("inactive_split_bytes", "Inactive split memory", True),
    ("allocation", "Allocations", False),
    ("active", "Active blocks", False),
    ("segment", "Segments", False),
    ("inactive_split", "Inactive split blocks", False),
)
_SUMMARY_POOLS: tuple[tuple[str, str], ...] = (
    ("small_pool", "blocks <= 1 MiB"),
    ("large_pool", "blocks > 1 MiB"),
)
_SUMMARY_COUNTERS: tuple[tuple[str, str], ...] = (
    ("num_alloc_retries", "Allocation retries (cache released after out-of-memory)"),
    ("num_ooms", "Out-of-memory errors raised"),
    ("num_device_alloc", "Segments allocated from the runtime"),
    ("num_device_free", "Segments returned to the runtime"),
)


def _format_bytes(value: int) -> str:
    """``value`` bytes as text: exact below 1 KiB, else two decimals of KiB/MiB/GiB/TiB."""
    magnitude = abs(value)
    if magnitude < 1024:
        return f"{value} B"
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if magnitude >= 1 << shift:
            return f"{value / (1 << shift):.2f} {unit}"
    raise AssertionError("unreachable")


def memory_summary(device: DeviceLike = None, abbreviated: bool = False) -> str:
    """A readable table of :func:`memory_stats` for ``device`` (like torch.cuda.memory_summary).

    For each statistic of the caching allocator (allocated, active, requested,
    reserved and inactive-split bytes, and the matching block/segment counts) it
    shows the current value, the peak since the last
    :func:`reset_peak_memory_stats`, and the totals allocated and freed since the
    last :func:`reset_accumulated_memory_stats`; then retries, out-of-memory errors
    and runtime calls, and the device's free/total memory. Unless ``abbreviated``,
    each statistic is also broken down by pool (small blocks up to 1 MiB, cut from
    2 MiB segments; large blocks above).
    """
    index = _index(device)
    stats = memory_stats(index)
    free, total = mem_get_info(index)
    columns = ("Current", "Peak", "Tot. alloc.", "Tot. freed")
    kinds = ("current", "peak", "allocated", "freed")
    label_width, cell_width = 36, 13
    width = label_width + len(columns) * (cell_width + 3) + 1

    def row(label: str, cells: tuple[str, ...]) -> str:
        values = "".join(f"| {cell:>{cell_width}} " for cell in cells)
        return f"| {label:<{label_width}}{values}|"

    rule, heavy = "|" + "-" * (width - 2) + "|", "|" + "=" * (width - 2) + "|"
    title = f"openreg caching allocator: device {index} (openreg:{index})"
    lines = [heavy, f"| {title:<{width - 4}} |", heavy, row("Metric", columns), rule]
    for key, label, is_bytes in _SUMMARY_ROWS:
        render = _format_bytes if is_bytes else str
        pools: tuple[tuple[str, str], ...] = (("all", label),)
        if not abbreviated:
            pools += tuple((pool, f"  from {name}") for pool, name in _SUMMARY_POOLS)
        for pool, text in pools:
            values = tuple(render(int(stats.get(f"{key}.{pool}.{kind}", 0))) for kind in kinds)
            lines.append(row(text, values))
        if not abbreviated or key in ("inactive_split_bytes", "inactive_split"):
            lines.append(rule)  # abbreviated: one rule after the bytes, one after the counts
    for key, label in _SUMMARY_COUNTERS:
        text = f"{label}: {int(stats.get(key, 0))}"
        lines.append(f"| {text:<{width - 4}} |")
    device_line = f"Device memory (runtime): {_format_bytes(free)} free of {_format_bytes(total)}"
    lines += [rule, f"| {device_line:<{width - 4}} |", heavy]
    return "\n".join(lines) + "\n"


# ---- Memory history and snapshots (torch.cuda.memory's private API) ----------

_HISTORY_ENABLED = (None, "state", "all")
_HISTORY_CONTEXT = (None, "state", "alloc", "all")
_HISTORY_STACKS = ("python", "all")


def _record_memory_history(
    enabled: str | None = "all",
    context: str | None = "all",
    stacks: str = "all",
    max_entries: int = sys.maxsize,
    device: DeviceLike = None,
    clear_history: bool = False,
) -> None:
    """Record allocator actions and allocation stacks, like torch.cuda's.

    ``enabled``: None stops recording, "state" keeps the stacks of live
    allocations, "all" also keeps a history of every action (at most
    ``max_entries`` per device; older entries are overwritten). ``context``:
    which actions carry a stack (None, "state": live allocations only,
    "alloc": allocations, "all": frees too). ``stacks``: "python" for Python
    frames, "all" for C++ frames too. Recording covers every openreg device
    (``device`` is accepted for torch.cuda compatibility and checked only).
    Read the result with :func:`_snapshot` or :func:`_dump_snapshot`.
    """
    if enabled not in _HISTORY_ENABLED:
        raise ValueError(
            f"_record_memory_history: enabled must be one of {_HISTORY_ENABLED}, got {enabled!r}"
        )
    if context not in _HISTORY_CONTEXT:
        raise ValueError(
            f"_record_memory_history: context must be one of {_HISTORY_CONTEXT}, got {context!r}"
        )
    if stacks not in _HISTORY_STACKS:
        raise ValueError(
            f"_record_memory_history: stacks must be one of {_HISTORY_STACKS}, got {stacks!r}"
        )
    if not isinstance(max_entries, int) or isinstance(max_entries, bool) or max_entries < 0:
        raise ValueError(
            "_record_memory_history: max_entries must be a non-negative int "
            f"(entries kept per device), got {max_entries!r}"
        )
    _index(device)
    _C._record_memory_history(
        enabled is not None,
        enabled == "all",
        context or "",
        stacks == "all",
        min(max_entries, sys.maxsize),
        clear_history,
    )


def _snapshot(device: DeviceLike = None) -> dict[str, Any]:
    """The allocator's state and recorded history, as torch.cuda.memory._snapshot().

    ``{"segments": [...], "device_traces": [[...] per device]}``: every segment
    with its blocks (state, size, requested size, allocation stack), and the
    actions recorded by :func:`_record_memory_history`. PyTorch's memory
    visualizer (``torch.cuda._memory_viz``, https://pytorch.org/memory_viz) reads it.
    """
    _index(device)
    return _C._memory_snapshot()


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Pickle :func:`_snapshot` to ``filename`` (the memory visualizer's input)."""
    snapshot = _snapshot()
    with open(filename, "wb") as file:
        pickle.dump(snapshot, file)


def memory_snapshot(
    mempool_id: tuple[int, int] | None = None, include_traces: bool = True
) -> list[dict[str, Any]]:
    """The segments of every openreg device, as torch.cuda.memory_snapshot()."""
    if mempool_id is not None:
        raise ValueError(
            "memory_snapshot: selecting one MemPool's segments is not supported yet; "
            "pass mempool_id=None (the segments of every pool)"
        )
    del include_traces  # the segments never include traces
    return _snapshot()["segments"]


__all__ = [
    "MemPool",
    "caching_allocator_alloc",
    "caching_allocator_delete",
    "empty_cache",
    "get_per_process_memory_fraction",
    "host_memory_stats",
    "host_memory_stats_as_nested_dict",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "memory_summary",
    "reset_accumulated_host_memory_stats",
    "reset_accumulated_memory_stats",
    "reset_peak_host_memory_stats",
    "reset_peak_memory_stats",
    "set_per_process_memory_fraction",
    "use_mem_pool",
]
