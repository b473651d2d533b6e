"""Device and pinned host memory statistics (torch.cuda.memory's statistics).

Device figures come from the binding's c10::DeviceAllocator through
torch.accelerator, so ``torch.openreg.memory_allocated()`` and
``torch.accelerator.memory_allocated()`` report the same numbers; private pools
and pinned host memory, which c10's interface has no word for, from the binding.
"""

from __future__ import annotations

import collections
from typing import Any

import torch

from ... import _C
from .._fork import _lazy_init
from .._utils import DeviceLike, _get_device_index


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


__all__ = [
    "host_memory_stats",
    "host_memory_stats_as_nested_dict",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "reset_accumulated_host_memory_stats",
    "reset_accumulated_memory_stats",
    "reset_peak_host_memory_stats",
    "reset_peak_memory_stats",
]
