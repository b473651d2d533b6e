"""
Low-level bindings of the OpenReg runtime C API (use openreg_runtime instead).
"""

from __future__ import annotations

import collections.abc
import enum
import typing

__all__: list[str] = [
    "UTILIZATION_WINDOW_MS",
    "DeviceBuffer",
    "Event",
    "HostBuffer",
    "IpcEventHandle",
    "IpcMemHandle",
    "MemcpyKind",
    "MemoryType",
    "PointerAttributes",
    "ProcessUsage",
    "Stream",
    "current_device",
    "device_count",
    "device_total_memory",
    "free",
    "free_host",
    "ipc_close_mem_handle",
    "ipc_get_mem_handle",
    "ipc_mem_query",
    "ipc_open_mem_handle",
    "malloc",
    "malloc_host",
    "mem_get_info",
    "memcpy",
    "memcpy_async",
    "memset",
    "pointer_attributes",
    "process_usage",
    "runtime_version",
    "set_device",
    "stream_priority_range",
    "synchronize",
]

class MemcpyKind(enum.IntEnum):
    """
    Direction of a raw memcpy.
    """

    DEFAULT = 4
    DEVICE_TO_DEVICE = 3
    DEVICE_TO_HOST = 2
    HOST_TO_DEVICE = 1
    HOST_TO_HOST = 0

class MemoryType(enum.IntEnum):
    """
    Kind of memory a pointer refers to.
    """

    DEVICE = 2
    HOST = 1
    UNREGISTERED = 0

class PointerAttributes:
    """
    What kind of memory an address is (see ``pointer_attributes``).
    """
    @property
    def allocation_base(self) -> int:
        """
        Start of the containing allocation (0 if unregistered).
        """
    @property
    def allocation_size(self) -> int:
        """
        Size in bytes of the containing allocation (0 if unregistered).
        """
    @property
    def device(self) -> int:
        """
        Owning device, or -1 for host memory.
        """
    @property
    def device_pointer(self) -> int:
        """
        The address itself for device memory, else 0.
        """
    @property
    def host_pointer(self) -> int:
        """
        The address itself for pinned host memory, else 0.
        """
    @property
    def type(self) -> MemoryType:
        """
        A ``MemoryType``.
        """

class ProcessUsage:
    """
    One process's use of one device, from the process registry.
    """
    @property
    def bytes_in_use(self) -> int:
        """
        Device memory the process has allocated (page multiples).
        """
    @property
    def capacity(self) -> int:
        """
        The device's capacity in that process.
        """
    @property
    def device(self) -> int: ...
    @property
    def name(self) -> str:
        """
        Process name (/proc/<pid>/comm; bytes that are not UTF-8 read as U+FFFD).
        """
    @property
    def pid(self) -> int: ...
    @property
    def start_time(self) -> int:
        """
        Start time of the process in clock ticks after boot (/proc/<pid>/stat).
        """
    @property
    def utilization(self) -> int:
        """
        Percent of the last second in which the process ran work on the device.
        """

class Stream:
    """
    A queue of work that runs in order on its own worker thread, asynchronously to the host.

    ``Stream(device=None, priority=0)`` creates one on ``device`` (default: the current
    device); priorities range from 0 (least) to -2 (greatest). ``Stream.default()`` is a
    device's default stream.
    """
    @staticmethod
    def default(device: typing.SupportsInt | typing.SupportsIndex | None = None) -> Stream:
        """
        The default stream of ``device`` (default: the current device).
        """
    def __eq__(self, arg0: typing.Any) -> bool: ...
    def __hash__(self) -> int: ...
    def __init__(
        self,
        device: typing.SupportsInt | typing.SupportsIndex | None = None,
        priority: typing.SupportsInt | typing.SupportsIndex = 0,
    ) -> None: ...
    def launch(self, function: collections.abc.Callable) -> None:
        """
        Enqueue a Python callable; an exception it raises surfaces at the next synchronizing
        call as LaunchFailureError.
        """
    def progress(self) -> tuple[int, int]:
        """
        ``(enqueued, completed)``: operations queued on the stream so far and how many
        have completed (in order), as orStreamGetProgress reports them.
        """
    def query(self) -> bool:
        """
        True if all work on the stream has completed; raises LaunchFailureError if some failed.
        """
    def record_event(self, event: Event | None = None) -> Event:
        """
        Record ``event`` (default: a new non-timing Event) on this stream and return it.
        """
    def sleep(self, seconds: typing.SupportsFloat | typing.SupportsIndex) -> None:
        """
        Enqueue work that sleeps ``seconds`` (0 to 86400) on the worker.
        """
    def synchronize(self) -> None:
        """
        Wait for all work queued on the stream; raises LaunchFailureError if some failed.

        Inside work running on a stream it raises NotPermittedError instead of waiting forever.
        """
    def wait_event(self, event: Event) -> None:
        """
        Later work on this stream waits for the event's most recent record.
        """
    def wait_stream(self, stream: Stream) -> None:
        """
        Later work on this stream waits for the work queued on ``stream`` so far.
        """
    @property
    def device(self) -> int:
        """
        Index of the stream's device.
        """
    @property
    def handle(self) -> int:
        """
        The ``orStream_t`` as an int.
        """
    @property
    def priority(self) -> int:
        """
        The stream's priority (0, -1 or -2).
        """

class Event:
    """
    A point in a stream's work: record it, wait for it, time between two.

    ``Event(enable_timing=False, device=None, interprocess=False)``; record with
    ``record`` or ``Stream.record_event``. An interprocess event (which cannot time)
    can be waited for by other processes: see ``ipc_handle``.
    """
    def __init__(
        self,
        enable_timing: bool = False,
        device: typing.SupportsInt | typing.SupportsIndex | None = None,
        interprocess: bool = False,
    ) -> None: ...
    def elapsed_time(self, end: Event) -> float:
        """
        Milliseconds from this event's record to ``end``'s (both timing events, completed).
        """
    @staticmethod
    def from_ipc_handle(handle: IpcEventHandle) -> Event:
        """
        Another process's interprocess event: wait for it, query or synchronize it
        (its latest record there at the time); it cannot be recorded here.
        """
    def ipc_handle(self) -> IpcEventHandle:
        """
        An ``IpcEventHandle`` for another process (``Event.from_ipc_handle`` there).
        """
    def query(self) -> bool:
        """
        True once the most recent record has completed (or if never recorded).
        """
    def record(self, stream: Stream | None = None) -> None:
        """
        Record on ``stream`` (default: the default stream of the current device).
        """
    def synchronize(self) -> None:
        """
        Wait for the most recent record; raises NotPermittedError inside stream work.
        """
    @property
    def enable_timing(self) -> bool:
        """
        Whether the event records time.
        """
    @property
    def handle(self) -> int:
        """
        The ``orEvent_t`` as an int.
        """

class IpcMemHandle:
    """
    A range of device memory shared with other processes (``ipc_get_mem_handle``).

    It owns a file descriptor that holds a lease on the range: the exporting process
    keeps the memory while the handle, a copy of it sent to another process, or an import
    of it exists. ``close`` it (or use it as a context manager) once it was sent. Sent
    through ``multiprocessing`` (after ``import openreg_runtime``) the descriptor travels
    with it.
    """
    def __enter__(self) -> IpcMemHandle: ...
    def __exit__(self, *args: object) -> None: ...
    def __init__(
        self,
        fd: typing.SupportsInt | typing.SupportsIndex,
        device: typing.SupportsInt | typing.SupportsIndex,
        memory_id: typing.SupportsInt | typing.SupportsIndex,
        offset: typing.SupportsInt | typing.SupportsIndex,
        size: typing.SupportsInt | typing.SupportsIndex,
        exporter_pid: typing.SupportsInt | typing.SupportsIndex,
    ) -> None:
        """
        A handle around a received descriptor, which it then owns.
        """
    def close(self) -> None:
        """
        Close the descriptor (and drop its lease).
        """
    @property
    def closed(self) -> bool:
        """
        True after ``close``.
        """
    @property
    def device(self) -> int:
        """
        Device index; imports map into this process's same index.
        """
    @property
    def exporter_pid(self) -> int:
        """
        The process whose device allocated the memory.
        """
    @property
    def fd(self) -> int:
        """
        The descriptor (raises once closed).
        """
    @property
    def memory_id(self) -> int:
        """
        Identifies the exporter's memory file (with offset and size: the bytes).
        """
    @property
    def offset(self) -> int:
        """
        First byte of the range in that file.
        """
    @property
    def size(self) -> int:
        """
        Bytes in the range.
        """

class IpcEventHandle:
    """
    An interprocess event shared with other processes (``Event.ipc_handle``).

    It owns a file descriptor; ``close`` it once it was sent.
    """
    def __enter__(self) -> IpcEventHandle: ...
    def __exit__(self, *args: object) -> None: ...
    def __init__(
        self,
        fd: typing.SupportsInt | typing.SupportsIndex,
        device: typing.SupportsInt | typing.SupportsIndex,
        slot: typing.SupportsInt | typing.SupportsIndex,
        epoch: typing.SupportsInt | typing.SupportsIndex,
        exporter_pid: typing.SupportsInt | typing.SupportsIndex,
    ) -> None:
        """
        A handle around a received descriptor, which it then owns.
        """
    def close(self) -> None:
        """
        Close the descriptor.
        """
    @property
    def closed(self) -> bool:
        """
        True after ``close``.
        """
    @property
    def device(self) -> int:
        """
        The event's device.
        """
    @property
    def epoch(self) -> int:
        """
        Which event occupies the slot.
        """
    @property
    def exporter_pid(self) -> int:
        """
        The process that created the event.
        """
    @property
    def fd(self) -> int:
        """
        The descriptor (raises once closed).
        """
    @property
    def slot(self) -> int:
        """
        Where the event's state lies in the exporter's event file.
        """

class HostBuffer:
    """
    Pinned host memory of ``nbytes`` bytes, exposed through the buffer protocol.

    Copies between pinned memory and the device may run asynchronously. The memory
    outlives the object until the work queued before it was dropped has completed.
    """
    def __init__(self, nbytes: typing.SupportsInt | typing.SupportsIndex) -> None: ...
    def __len__(self) -> int: ...
    @property
    def nbytes(self) -> int:
        """
        Size in bytes.
        """
    @property
    def ptr(self) -> int:
        """
        Address of the memory.
        """

class DeviceBuffer:
    """
    ``nbytes`` bytes of device memory on ``device`` (default: the current device).

    Host code cannot read ``ptr``; copy with ``copy_from``/``copy_to``/``to_bytes``. Use it
    as a context manager, or call ``free``, to release it before it is garbage-collected.
    """
    def __enter__(self) -> DeviceBuffer: ...
    def __exit__(self, *args: object) -> None: ...
    def __init__(
        self,
        nbytes: typing.SupportsInt | typing.SupportsIndex,
        device: typing.SupportsInt | typing.SupportsIndex | None = None,
    ) -> None: ...
    def __len__(self) -> int: ...
    def __repr__(self) -> str: ...
    def copy_from(
        self,
        source: typing.Any,
        *,
        offset: typing.SupportsInt | typing.SupportsIndex = 0,
        stream: Stream | None = None,
    ) -> None:
        """
        Copy all of ``source`` (a DeviceBuffer, HostBuffer or buffer-protocol object) to
        ``offset``. Synchronous without ``stream``; ordered on ``stream`` with one
        (asynchronous from pinned memory).
        """
    def copy_to(
        self,
        destination: typing.Any,
        *,
        offset: typing.SupportsInt | typing.SupportsIndex = 0,
        stream: Stream | None = None,
    ) -> None:
        """
        Fill all of ``destination`` (a DeviceBuffer, HostBuffer or writable buffer-protocol
        object) from ``offset``; synchronous without ``stream``, as ``copy_from``.
        """
    def fill(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        Set every byte to ``value`` (0..255).
        """
    def free(self) -> None:
        """
        Release the memory now (stream-ordered: queued work using it still completes).
        """
    def to_bytes(
        self,
        offset: typing.SupportsInt | typing.SupportsIndex = 0,
        count: typing.SupportsInt | typing.SupportsIndex | None = None,
    ) -> bytes:
        """
        The contents (from ``offset``, ``count`` bytes or to the end) as ``bytes``.
        """
    @property
    def device(self) -> int:
        """
        Index of the owning device.
        """
    @property
    def freed(self) -> bool:
        """
        True after ``free``.
        """
    @property
    def nbytes(self) -> int:
        """
        Size in bytes.
        """
    @property
    def ptr(self) -> int:
        """
        Device address (not host-accessible).
        """

def current_device() -> int:
    """
    Index of the calling thread's current device.
    """

def device_count() -> int:
    """
    Number of OpenReg devices (OPENREG_DEVICE_COUNT, default 2).
    """

def device_total_memory(device: typing.SupportsInt | typing.SupportsIndex) -> int:
    """
    Capacity of ``device`` in bytes, without activating it (``OPENREG_DEVICE_MEMORY``).
    """

def free(ptr: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    Free device memory from ``malloc``. Returns at once; the memory is reused only after
    the work queued before the call (on any stream) has completed.
    """

def free_host(ptr: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    Free pinned host memory from ``malloc_host`` (stream-ordered, like ``free``).
    """

def ipc_close_mem_handle(ptr: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    End one open of an imported address; the last one unmaps it once the work queued
    before the call has completed.
    """

def ipc_get_mem_handle(
    ptr: typing.SupportsInt | typing.SupportsIndex,
    size: typing.SupportsInt | typing.SupportsIndex | None = None,
) -> IpcMemHandle:
    """
    An IpcMemHandle for the allocation starting at ``ptr`` (orIpcGetMemHandle), or for
    ``size`` bytes from ``ptr`` inside one allocation (orIpcGetMemRangeHandle).
    """

def ipc_mem_query(
    ptr: typing.SupportsInt | typing.SupportsIndex,
    size: typing.SupportsInt | typing.SupportsIndex = 0,
) -> bool:
    """
    True when no other process (and no handle not yet closed) holds any part of
    ``size`` bytes from ``ptr`` (0: the whole allocation).
    """

def ipc_open_mem_handle(handle: IpcMemHandle) -> int:
    """
    Map another process's memory; returns its device address here. Opening a range
    already open returns the same address; close each open with ``ipc_close_mem_handle``.
    """

def malloc(
    size: typing.SupportsInt | typing.SupportsIndex,
    device: typing.SupportsInt | typing.SupportsIndex | None = None,
) -> int:
    """
    Allocate ``size`` bytes of device memory; returns its address (0 for size 0).

    The address is not host-accessible. Free it with ``free``.
    """

def malloc_host(size: typing.SupportsInt | typing.SupportsIndex) -> int:
    """
    Allocate ``size`` bytes of pinned host memory; returns its address.
    """

def mem_get_info(
    device: typing.SupportsInt | typing.SupportsIndex | None = None,
) -> tuple[int, int]:
    """
    ``(free, total)`` bytes of ``device`` (default: the current one).
    """

def memcpy(
    dst: typing.SupportsInt | typing.SupportsIndex,
    src: typing.SupportsInt | typing.SupportsIndex,
    count: typing.SupportsInt | typing.SupportsIndex,
    kind: MemcpyKind,
) -> None:
    """
    Copy ``count`` bytes between raw addresses; returns when the copy is complete.
    """

def memcpy_async(
    dst: typing.SupportsInt | typing.SupportsIndex,
    src: typing.SupportsInt | typing.SupportsIndex,
    count: typing.SupportsInt | typing.SupportsIndex,
    kind: MemcpyKind,
    stream: Stream | None = None,
) -> None:
    """
    Copy ordered on ``stream`` (default: the current device's default stream).

    Asynchronous when the host side is pinned (or both are device memory); with
    pageable host memory it completes before returning.
    """

def memset(
    ptr: typing.SupportsInt | typing.SupportsIndex,
    value: typing.SupportsInt | typing.SupportsIndex,
    count: typing.SupportsInt | typing.SupportsIndex,
) -> None:
    """
    Fill ``count`` bytes of device memory with the byte ``value`` (synchronous).
    """

def pointer_attributes(ptr: typing.SupportsInt | typing.SupportsIndex) -> PointerAttributes:
    """
    Classify any address: device, pinned host or ordinary (unregistered) memory.
    """

def process_usage() -> list[ProcessUsage]:
    """
    Every live process of this user using a device, one entry per (process, device),
    ordered by device then pid (the registry openreg-smi reads; never activates a
    device). Raises NotPermittedError when the registry directory is not private.
    """

def runtime_version() -> int:
    """
    Runtime version as ``major * 1000 + minor * 10``.
    """

def set_device(device: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    Make ``device`` the calling thread's current device.
    """

def stream_priority_range() -> tuple[int, int]:
    """
    ``(least, greatest)`` stream priority: ``(0, -2)``; lower numbers mean higher priority.
    """

def synchronize(device: typing.SupportsInt | typing.SupportsIndex | None = None) -> None:
    """
    Wait for all work on every stream of ``device`` (default: the current one).

    Raises LaunchFailureError if queued work failed, and NotPermittedError when called
    inside work running on a stream.
    """

UTILIZATION_WINDOW_MS: int = 1000
