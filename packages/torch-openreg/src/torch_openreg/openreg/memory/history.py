"""Reading the allocator's state: the summary table, snapshots and the allocation history."""

from __future__ import annotations

import pickle
import sys
from typing import Any

from ... import _C
from .._utils import DeviceLike
from .control import mem_get_info
from .statistics import _index, memory_stats

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


__all__ = ["memory_snapshot", "memory_summary"]
