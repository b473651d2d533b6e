"""OpenReg runtime: a simulated accelerator, usable from Python and from C.

The device model in brief: devices (``OPENREG_DEVICE_COUNT``) with their own
memory that host code cannot touch (``DeviceBuffer``), pinned host memory
(``HostBuffer``), asynchronous FIFO ``Stream``s and ``Event``s. Device memory
and events can be shared with other processes without copying
(``ipc_get_mem_handle``, ``Event(interprocess=True)``; the handles travel
through ``multiprocessing``). Errors raise subclasses of
:class:`~openreg_runtime.errors.OpenRegError`.

For native code: :func:`get_include`, :func:`get_library_dir`,
:func:`library_path`, and :func:`load_library` (call it before importing an
extension that links against ``libopenreg.so``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ._loader import get_include, get_library_dir, library_path, load_library

load_library()

from ._runtime import (  # noqa: E402  (the library must be loaded first)
    UTILIZATION_WINDOW_MS,
    DeviceBuffer,
    Event,
    HostBuffer,
    IpcEventHandle,
    IpcMemHandle,
    MemcpyKind,
    MemoryType,
    PointerAttributes,
    ProcessUsage,
    Stream,
    current_device,
    device_count,
    device_total_memory,
    free,
    free_host,
    ipc_close_mem_handle,
    ipc_get_mem_handle,
    ipc_mem_query,
    ipc_open_mem_handle,
    malloc,
    malloc_host,
    mem_get_info,
    memcpy,
    memcpy_async,
    memset,
    pointer_attributes,
    process_usage,
    runtime_version,
    set_device,
    stream_priority_range,
    synchronize,
)
from .errors import (  # noqa: E402
    DeviceMismatchError,
    InitializationError,
    InvalidDeviceError,
    InvalidDevicePointerError,
    InvalidHandleError,
    InvalidHostPointerError,
    InvalidMemcpyDirectionError,
    InvalidValueError,
    LaunchFailureError,
    NotPermittedError,
    NotReadyError,
    OpenRegError,
    OutOfMemoryError,
)
from .ipc import register_reducers  # noqa: E402

__version__ = "0.1.0"

register_reducers()


@contextmanager
def device(index: int) -> Iterator[None]:
    """Make ``index`` the calling thread's current device inside the block."""
    previous = current_device()
    set_device(index)
    try:
        yield
    finally:
        set_device(previous)


def utilization(device: int | None = None) -> int:
    """Percent of the last second in which work ran on ``device`` (default: the current one).

    Summed over this user's processes using the device and capped at 100: simulated
    devices of different processes run side by side on the host's cores. Reads the
    process registry (``process_usage``); does not activate the device.
    """
    index = current_device() if device is None else device
    if not 0 <= index < device_count():
        raise InvalidDeviceError(
            f"device index {index} is out of range: there are {device_count()} OpenReg devices; "
            "set OPENREG_DEVICE_COUNT to change the count"
        )
    return min(100, sum(u.utilization for u in process_usage() if u.device == index))


__all__ = [
    "UTILIZATION_WINDOW_MS",
    "DeviceBuffer",
    "DeviceMismatchError",
    "Event",
    "HostBuffer",
    "InitializationError",
    "InvalidDeviceError",
    "InvalidDevicePointerError",
    "InvalidHandleError",
    "InvalidHostPointerError",
    "InvalidMemcpyDirectionError",
    "InvalidValueError",
    "IpcEventHandle",
    "IpcMemHandle",
    "LaunchFailureError",
    "MemcpyKind",
    "MemoryType",
    "NotPermittedError",
    "NotReadyError",
    "OpenRegError",
    "OutOfMemoryError",
    "PointerAttributes",
    "ProcessUsage",
    "Stream",
    "current_device",
    "device",
    "device_count",
    "device_total_memory",
    "free",
    "free_host",
    "get_include",
    "get_library_dir",
    "ipc_close_mem_handle",
    "ipc_get_mem_handle",
    "ipc_mem_query",
    "ipc_open_mem_handle",
    "library_path",
    "load_library",
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
    "utilization",
]
