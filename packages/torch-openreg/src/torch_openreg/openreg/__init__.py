"""torch.openreg: the device module of the OpenReg simulated accelerator.

Mirrors ``torch.cuda`` wherever the concept exists, so code written for one
reads the same for the other.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import TracebackType

import torch

from .. import _C
from . import _utils, amp, debug
from ._utils import DeviceLike, _get_device_index
from .memory import (
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
)
from .monitoring import list_gpu_processes, utilization
from .random import (
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .streams import (
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
)

_initialized_pid = os.getpid()


def is_available() -> bool:
    """True if at least one openreg device can be used."""
    return device_count() > 0


def device_count() -> int:
    """Number of openreg devices (``OPENREG_DEVICE_COUNT``; 0 if it is invalid)."""
    return _C._device_count()


def current_device() -> int:
    """Index of the calling thread's current openreg device."""
    return _C._get_device()


def set_device(device: DeviceLike) -> None:
    """Make ``device`` the calling thread's current openreg device."""
    index = _get_device_index(device, optional=True)
    if index >= 0:
        _C._set_device(index)


def synchronize(device: DeviceLike = None) -> None:
    """Wait for all work on all streams of ``device`` (default: current device)."""
    _C._synchronize(_get_device_index(device, optional=True))


def is_initialized() -> bool:
    """True once any openreg device has been used in this process."""
    return _C._is_initialized()


def init() -> None:
    """Initialise the openreg runtime now (it is otherwise initialised lazily).

    Raises if OPENREG_DEVICE_COUNT / OPENREG_DEVICE_MEMORY are invalid.
    """
    _C._check_runtime()


def _is_in_bad_fork() -> bool:
    return is_initialized() and os.getpid() != _initialized_pid


def _checked_index(device: DeviceLike) -> int:
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
    return f"OpenReg simulated device {_checked_index(device)}"


@dataclass(frozen=True)
class _DeviceProperties:
    """What ``get_device_properties`` reports (field names as in torch.cuda's)."""

    name: str
    total_memory: int
    multi_processor_count: int  # host cores: kernels run on the CPU


def get_device_properties(device: DeviceLike = None) -> _DeviceProperties:
    """Properties of an openreg device (like torch.cuda.get_device_properties)."""
    index = _checked_index(device)
    return _DeviceProperties(
        name=get_device_name(index),
        total_memory=_C._mem_get_info(index)[1],
        multi_processor_count=os.cpu_count() or 1,
    )


def _inductor_backend_init() -> None:
    """Called by Inductor the first time it compiles for openreg: registers the backend."""
    from .._compile import register_inductor_backend

    register_inductor_backend()


def get_amp_supported_dtype() -> list[torch.dtype]:
    """The dtypes ``torch.autocast("openreg", dtype=...)`` accepts: float16 and bfloat16.

    Every openreg operator runs on the CPU's kernels, which compute both, so
    both are always supported (float16 is the default, as on CUDA).
    """
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """True if openreg devices support bfloat16 (like ``torch.cuda.is_bf16_supported``).

    Every openreg device computes bfloat16 natively, so ``including_emulation``
    changes nothing; False only when no openreg device is available, as on CUDA.
    """
    return is_available()


_MAX_SLEEP_MS = 86_400_000  # one day, as openreg_runtime.Stream.sleep


def _sleep(milliseconds: float, device: DeviceLike = None) -> None:
    """Enqueue a kernel that only waits, on the current stream (like torch.cuda._sleep).

    ``milliseconds`` is a number from 0 to 86400000 (one day); anything else
    (negative, NaN, infinite, huge) is a ValueError.
    """
    if not (0 <= milliseconds <= _MAX_SLEEP_MS):  # also false for NaN
        raise ValueError(
            f"_sleep: the duration must be a number of milliseconds from 0 to {_MAX_SLEEP_MS} "
            f"(one day), got {milliseconds!r}"
        )
    _C._sleep(_get_device_index(device, optional=True), round(milliseconds * 1000))


def _lazy_init() -> None:
    """Kept for device-module protocol compatibility; openreg initialises lazily itself."""


class device:
    """Context manager that changes the current openreg device (like torch.cuda.device)."""

    def __init__(self, device: DeviceLike) -> None:
        self.idx = _get_device_index(device, optional=True)
        self.prev_idx = -1

    def __enter__(self) -> None:
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


def __getattr__(name: str) -> object:
    # default_generators is created on first use: creating generators
    # requires the device count, which reads the environment.
    if name == "default_generators":
        return tuple(_C._get_default_generator(i) for i in range(device_count()))
    # torch.cuda's flag, read by device-generic code: torch.utils.checkpoint saves
    # and restores a device's RNG state only if its module says it is initialised.
    if name == "_initialized":
        return is_initialized()
    raise AttributeError(f"module 'torch.openreg' has no attribute {name!r}")


__all__ = [
    "Event",
    "Stream",
    "StreamContext",
    "_utils",
    "amp",
    "current_device",
    "current_stream",
    "debug",
    "default_stream",
    "device",
    "device_count",
    "device_of",
    "empty_cache",
    "get_amp_supported_dtype",
    "get_device_name",
    "get_device_properties",
    "get_rng_state",
    "get_rng_state_all",
    "init",
    "initial_seed",
    "is_available",
    "is_bf16_supported",
    "is_initialized",
    "list_gpu_processes",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "stream",
    "synchronize",
    "utilization",
]
