"""Device memory statistics and management (mirrors torch.cuda.memory).

Backed by the binding's c10::DeviceAllocator through torch.accelerator, so
``torch.openreg.memory_allocated()`` and ``torch.accelerator.memory_allocated()``
report the same numbers.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import _C
from ._utils import DeviceLike, _get_device_index


def _index(device: DeviceLike) -> int:
    return _get_device_index(device, optional=True)


def memory_stats(device: DeviceLike = None) -> dict[str, Any]:
    """Allocator statistics of ``device``, with torch.cuda's key names."""
    return torch.accelerator.memory_stats(_index(device))


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
    torch.accelerator.empty_cache()


def mem_get_info(device: DeviceLike = None) -> tuple[int, int]:
    """(free, total) bytes of ``device`` as the runtime sees them."""
    free, total = _C._mem_get_info(_index(device))
    return free, total


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


__all__ = [
    "empty_cache",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
]
