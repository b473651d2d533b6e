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
    return tuple(_C._mem_get_info(_index(device)))


__all__ = [
    "empty_cache",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
]
