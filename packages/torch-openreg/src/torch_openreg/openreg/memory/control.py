"""Controlling device memory: the cache, the per-process fraction, raw allocations, private pools.

The memory fraction, raw allocations and private pools (``MemPool``) have no
word in c10's allocator interface: they come from the binding directly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from ... import _C
from .._fork import _lazy_init
from .._utils import DeviceLike
from .statistics import _index


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


__all__ = [
    "MemPool",
    "caching_allocator_alloc",
    "caching_allocator_delete",
    "empty_cache",
    "get_per_process_memory_fraction",
    "mem_get_info",
    "set_per_process_memory_fraction",
    "use_mem_pool",
]
