"""Devices: how many, which is current, waiting for them, their names (like torch.cuda's)."""

from __future__ import annotations

from types import TracebackType

import torch

from .. import _C
from ._fork import _is_in_bad_fork, _lazy_init
from ._utils import DeviceLike, _get_device_index

# torch.openreg.OutOfMemoryError is torch.OutOfMemoryError, as for torch.cuda.
OutOfMemoryError = torch.OutOfMemoryError


def is_available() -> bool:
    """True if at least one openreg device can be used."""
    return device_count() > 0


def device_count() -> int:
    """Number of openreg devices (``OPENREG_DEVICE_COUNT``; 0 if it is invalid)."""
    return _C._device_count()


def current_device() -> int:
    """Index of the calling thread's current openreg device."""
    _lazy_init()
    return _C._get_device()


def set_device(device: DeviceLike) -> None:
    """Make ``device`` the calling thread's current openreg device."""
    _lazy_init()
    index = _get_device_index(device, optional=True)
    if index >= 0:
        _C._set_device(index)


def synchronize(device: DeviceLike = None) -> None:
    """Wait for all work on all streams of ``device`` (default: current device)."""
    _lazy_init()
    _C._synchronize(_get_device_index(device, optional=True))


def is_initialized() -> bool:
    """True once any openreg device has been used in this process (false in a bad fork)."""
    return _C._is_initialized() and not _is_in_bad_fork()


def init() -> None:
    """Initialise the openreg runtime now (it is otherwise initialised lazily).

    Raises if OPENREG_DEVICE_COUNT / OPENREG_DEVICE_MEMORY are invalid, or in a
    child forked after the parent used a device (use the 'spawn' start method).
    """
    _lazy_init()
    _C._check_runtime()


def checked_index(device: DeviceLike) -> int:
    _lazy_init()
    index = _get_device_index(device, optional=True)
    count = device_count()
    if not 0 <= index < count:
        raise RuntimeError(
            f"Invalid openreg device index {index}: there are {count} openreg devices "
            f"(valid indices 0..{count - 1}); set OPENREG_DEVICE_COUNT to change the count"
        )
    return index


def get_device_name(device: DeviceLike = None) -> str:
    """Name of an openreg device."""
    return f"OpenReg simulated device {checked_index(device)}"


def can_device_access_peer(device: DeviceLike, peer_device: DeviceLike) -> bool:
    """True if kernels on ``device`` can read and write ``peer_device``'s memory.

    Work on any openreg stream reaches every device's memory (cross-device
    copies run as one kernel), so this holds for any two different devices; a
    device is not its own peer, as with CUDA.
    """
    if peer_device is None:
        raise ValueError("can_device_access_peer: pass the peer device (an index or 'openreg:N')")
    return checked_index(device) != checked_index(peer_device)


class device:
    """Context manager that changes the current openreg device (like torch.cuda.device)."""

    def __init__(self, device: DeviceLike) -> None:
        self.idx = _get_device_index(device, optional=True)
        self.prev_idx = -1

    def __enter__(self) -> None:
        _lazy_init()
        self.prev_idx = _C._exchange_device(self.idx)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        _C._exchange_device(self.prev_idx)


class device_of(device):
    """Context manager that makes the device of tensor ``obj`` current."""

    def __init__(self, obj: torch.Tensor) -> None:
        super().__init__(obj.get_device() if obj.is_openreg else -1)


__all__ = [
    "OutOfMemoryError",
    "can_device_access_peer",
    "current_device",
    "device",
    "device_count",
    "device_of",
    "get_device_name",
    "init",
    "is_available",
    "is_initialized",
    "set_device",
    "synchronize",
]
