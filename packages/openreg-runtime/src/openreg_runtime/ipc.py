"""Sending the runtime's IPC handles through ``multiprocessing``.

An :class:`IpcMemHandle` or :class:`IpcEventHandle` owns a file descriptor,
which plain pickling cannot carry. This module registers reducers with
``multiprocessing``'s pickler so that a handle put on a queue, sent over a
pipe or passed to a spawned process travels with a duplicate of its
descriptor (``multiprocessing.reduction.DupFd``: SCM_RIGHTS, or inheritance by
a process being started); the receiver gets a handle that owns the descriptor
it received. The sender's handle keeps its own descriptor: close it once sent.
"""

from __future__ import annotations

from collections.abc import Callable
from multiprocessing import reduction
from typing import Any, Protocol

from ._runtime import IpcEventHandle, IpcMemHandle


class _Detachable(Protocol):
    def detach(self) -> int: ...


def _rebuild_mem_handle(
    descriptor: _Detachable, device: int, memory_id: int, offset: int, size: int, pid: int
) -> IpcMemHandle:
    return IpcMemHandle(descriptor.detach(), device, memory_id, offset, size, pid)


def _reduce_mem_handle(handle: IpcMemHandle) -> tuple[Callable[..., IpcMemHandle], tuple[Any, ...]]:
    fields = (handle.device, handle.memory_id, handle.offset, handle.size, handle.exporter_pid)
    return _rebuild_mem_handle, (reduction.DupFd(handle.fd), *fields)


def _rebuild_event_handle(
    descriptor: _Detachable, device: int, slot: int, epoch: int, pid: int
) -> IpcEventHandle:
    return IpcEventHandle(descriptor.detach(), device, slot, epoch, pid)


def _reduce_event_handle(
    handle: IpcEventHandle,
) -> tuple[Callable[..., IpcEventHandle], tuple[Any, ...]]:
    fields = (handle.device, handle.slot, handle.epoch, handle.exporter_pid)
    return _rebuild_event_handle, (reduction.DupFd(handle.fd), *fields)


def register_reducers() -> None:
    """Let ``multiprocessing`` send IPC handles (done when ``openreg_runtime`` is imported)."""
    reduction.register(IpcMemHandle, _reduce_mem_handle)
    reduction.register(IpcEventHandle, _reduce_event_handle)
