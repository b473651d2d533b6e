"""File descriptors and event handles that cross process boundaries.

An openreg handle is plain fields plus a file descriptor (openreg.h,
"Interprocess communication"), and a descriptor can only reach another process
through the kernel. ``SentDescriptors`` pickles descriptors the way
``multiprocessing`` pickles one for CPU tensors (``resource_sharer.DupFd``):
duplicates wait in this process until the receiver fetches them over a
Unix-domain socket (SCM_RIGHTS), and are closed once sent. Several descriptors
travel in one fetch, so a storage with its event costs one connection, as a
CPU storage does.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from multiprocessing import reduction, resource_sharer
from typing import Any


def _socket_of(connection: Any) -> socket.socket:
    # As multiprocessing.reduction.send_handle: the connection's socket, for SCM_RIGHTS.
    return socket.fromfd(connection.fileno(), socket.AF_UNIX, socket.SOCK_STREAM)


def _close_all(descriptors: Sequence[int]) -> None:
    for descriptor in descriptors:
        os.close(descriptor)


class SentDescriptors:
    """Descriptors pickled for another process; ``detach()`` there returns its own copies."""

    def __init__(self, descriptors: Sequence[int]) -> None:
        duplicates = [os.dup(descriptor) for descriptor in descriptors]

        def send(connection: Any, pid: int) -> None:
            with _socket_of(connection) as sock:
                reduction.sendfds(sock, duplicates)

        # The sharer closes the duplicates once sent (or when this process exits).
        sharer = resource_sharer._resource_sharer  # type: ignore[attr-defined]
        self._id = sharer.register(send, lambda: _close_all(duplicates))
        self._count = len(duplicates)

    def detach(self) -> list[int]:
        """Fetch the descriptors from the sending process (once); the caller owns them."""
        sharer = resource_sharer._resource_sharer  # type: ignore[attr-defined]
        with sharer.get_connection(self._id) as connection, _socket_of(connection) as sock:
            return list(reduction.recvfds(sock, self._count))


class IpcEventHandle:
    """An interprocess event, for another process (``torch.openreg.Event.ipc_handle``).

    It owns a file descriptor (closed by ``close()`` or when the handle is
    collected). Send it to another process through ``multiprocessing`` (a queue,
    a pipe, a process argument) and open it there with
    ``torch.openreg.Event.from_ipc_handle(device, handle)``.
    """

    def __init__(self, fd: int, device: int, slot: int, epoch: int, exporter_pid: int) -> None:
        self._fd = fd
        self.device = device
        self.slot = slot
        self.epoch = epoch
        self.exporter_pid = exporter_pid

    def fields(self) -> tuple[int, int, int, int, int]:
        """(fd, device, slot, epoch, exporter_pid), as ``torch_openreg._C`` takes them."""
        if self._fd < 0:
            raise ValueError("this IpcEventHandle was closed")
        return (self._fd, self.device, self.slot, self.epoch, self.exporter_pid)

    def close(self) -> None:
        """Close the descriptor (the event itself is not affected)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self.close()

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        fd, *rest = self.fields()
        return (_rebuild_event_handle, (SentDescriptors([fd]), *rest))

    def __repr__(self) -> str:
        return (
            f"IpcEventHandle(device={self.device}, slot={self.slot}, epoch={self.epoch}, "
            f"exporter_pid={self.exporter_pid})"
        )


def _rebuild_event_handle(
    sent: SentDescriptors, device: int, slot: int, epoch: int, exporter_pid: int
) -> IpcEventHandle:
    (fd,) = sent.detach()
    return IpcEventHandle(fd, device, slot, epoch, exporter_pid)
