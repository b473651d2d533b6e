"""Code run in spawned peer processes by test_runtime_ipc.py.

Each function is a process target: it talks to the test over a
``multiprocessing`` connection (handles travel with their descriptors, see
``openreg_runtime.ipc``) and waits for the test's messages with a deadline, so a
lost message fails the test instead of hanging it.
"""

from __future__ import annotations

import os
from multiprocessing.connection import Connection
from typing import Any

import openreg_runtime as rt

DEADLINE = 120.0


def receive(connection: Connection) -> Any:
    if not connection.poll(DEADLINE):
        raise TimeoutError("the test sent nothing within the deadline")
    return connection.recv()


def export_pattern(connection: Connection, size: int, byte: int) -> None:
    """Allocates ``size`` bytes filled with ``byte`` and sends a handle; then reports
    what the buffer holds after the peer wrote to it, and exits when told."""
    buffer = rt.DeviceBuffer(size)
    buffer.fill(byte)
    with rt.ipc_get_mem_handle(buffer.ptr) as handle:
        connection.send(handle)
    assert receive(connection) == "written"
    connection.send(buffer.to_bytes(0, 16))
    assert receive(connection) == "exit"


def export_and_linger(connection: Connection, size: int) -> None:
    """Exports a filled buffer, then waits to be killed (never exits by itself)."""
    buffer = rt.DeviceBuffer(size)
    buffer.fill(0x5A)
    with rt.ipc_get_mem_handle(buffer.ptr) as handle:
        connection.send((handle, os.getpid()))
    receive(connection)  # the test kills this process instead of answering


def import_and_write(connection: Connection, byte: int) -> None:
    """Imports the memory it is sent, fills it with ``byte`` and keeps it open until told."""
    handle = receive(connection)
    pointer = rt.ipc_open_mem_handle(handle)
    handle.close()
    rt.memset(pointer, byte, handle.size)
    connection.send(("imported", os.getpid()))
    message = receive(connection)
    if message == "close":
        rt.ipc_close_mem_handle(pointer)
        rt.synchronize()
        connection.send("closed")
        receive(connection)


def import_and_hold(connection: Connection) -> None:
    """Imports the memory it is sent and keeps it until killed."""
    handle = receive(connection)
    rt.ipc_open_mem_handle(handle)
    handle.close()
    connection.send(("imported", os.getpid()))
    receive(connection)


def record_behind_held_work(connection: Connection, size: int) -> None:
    """Queues a fill of shared memory behind a callback that blocks until the test says
    so, records an interprocess event after it, and sends the memory and the event."""
    import threading

    release = threading.Event()
    stream = rt.Stream()
    stream.launch(lambda: release.wait(DEADLINE) or None)
    buffer = rt.DeviceBuffer(size)
    buffer.fill(0x11)
    pinned = rt.HostBuffer(size)
    memoryview(pinned)[:] = bytes([0x77]) * size
    buffer.copy_from(pinned, stream=stream)  # pinned: queued behind the held callback
    event = rt.Event(interprocess=True)
    event.record(stream)
    with rt.ipc_get_mem_handle(buffer.ptr) as memory, event.ipc_handle() as shared:
        connection.send((memory, shared))
    message = receive(connection)
    if message == "die":
        os._exit(3)  # with the recorded work still held: it never completes
    release.set()
    stream.synchronize()
    assert receive(connection) == "exit"
