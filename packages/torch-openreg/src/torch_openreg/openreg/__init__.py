"""torch.openreg: the device module of the OpenReg simulated accelerator.

Mirrors ``torch.cuda`` wherever the concept exists, so code written for one
reads the same for the other.
"""

from __future__ import annotations

import functools
import os
import socket
import uuid
from dataclasses import dataclass
from types import TracebackType

import torch

from .. import _C
from . import _utils, amp, debug
from ._fork import _is_in_bad_fork, _lazy_init
from ._utils import DeviceLike, _get_device_index
from .memory import (
    MemPool,
    caching_allocator_alloc,
    caching_allocator_delete,
    empty_cache,
    get_per_process_memory_fraction,
    host_memory_stats,
    host_memory_stats_as_nested_dict,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_snapshot,
    memory_stats,
    memory_stats_as_nested_dict,
    memory_summary,
    reset_accumulated_host_memory_stats,
    reset_accumulated_memory_stats,
    reset_peak_host_memory_stats,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
    use_mem_pool,
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


def _checked_index(device: DeviceLike) -> int:
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
    return f"OpenReg simulated device {_checked_index(device)}"


# The simulated device's generation, reported as its compute capability.
_CAPABILITY = (1, 0)


@dataclass(frozen=True)
class _OpenRegDeviceProperties:
    """What :func:`get_device_properties` reports, with torch.cuda's field names.

    Kernels are CPU kernels run by the device's stream workers, so the
    "multiprocessors" are the host cores those threads may run on, each running
    one thread at a time. Fields with no counterpart on this device hold the
    value stated below rather than an invented one.
    """

    name: str
    major: int  # (major, minor) = 1.0, the simulated device's generation
    minor: int
    total_memory: int  # bytes: the device's capacity (OPENREG_DEVICE_MEMORY)
    multi_processor_count: int  # host cores the process (and its kernels) may use
    is_integrated: int  # 0: device memory is separate (host code cannot access it)
    is_multi_gpu_board: int  # 0
    max_threads_per_multi_processor: int  # 1: a core runs one kernel thread at a time
    max_threads_per_block: int  # a kernel may use every core: multi_processor_count
    warp_size: int  # 1: threads do not run in lockstep groups
    regs_per_multiprocessor: int  # 0: not modelled
    shared_memory_per_block: int  # 0: there is no on-chip scratchpad memory
    shared_memory_per_multiprocessor: int  # 0
    shared_memory_per_block_optin: int  # 0
    L2_cache_size: int  # bytes: the host cores' L2 cache (0 if the host does not say)
    clock_rate: int  # kHz: the host cores' clock (0 if the host does not say)
    memory_clock_rate: int  # 0: not modelled
    memory_bus_width: int  # 0: not modelled
    uuid: str  # stable for a host name and device index
    pci_bus_id: int  # 0: not on a bus
    pci_device_id: int  # the device index
    pci_domain_id: int  # 0
    gcnArchName: str  # "": not an AMD GPU

    def __repr__(self) -> str:
        mebibyte = 1 << 20
        return (
            f"_OpenRegDeviceProperties(name={self.name!r}, major={self.major}, "
            f"minor={self.minor}, total_memory={self.total_memory // mebibyte}MB, "
            f"multi_processor_count={self.multi_processor_count}, uuid={self.uuid}, "
            f"pci_bus_id={self.pci_bus_id}, pci_device_id={self.pci_device_id}, "
            f"pci_domain_id={self.pci_domain_id}, "
            f"L2_cache_size={self.L2_cache_size // mebibyte}MB)"
        )


def _usable_cores() -> int:
    # The affinity mask, not os.cpu_count(): a container or taskset may allow fewer.
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@functools.cache
def _host_cpu_facts() -> tuple[int, int]:
    """(L2 cache bytes, clock kHz) of the host's first core; 0 where unknown."""
    l2_bytes = 0
    cache_root = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in sorted(os.listdir(cache_root)):
            with open(f"{cache_root}/{entry}/level") as level_file:
                if level_file.read().strip() != "2":
                    continue
            with open(f"{cache_root}/{entry}/size") as size_file:
                text = size_file.read().strip()
            units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
            l2_bytes = int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)
            break
    except (OSError, ValueError):
        l2_bytes = 0
    clock_khz = 0
    try:
        with open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq") as frequency:
            clock_khz = int(frequency.read().strip())
    except (OSError, ValueError):
        try:
            with open("/proc/cpuinfo") as cpuinfo:
                for line in cpuinfo:
                    if line.startswith("cpu MHz"):
                        clock_khz = round(float(line.split(":")[1]) * 1000)
                        break
        except (OSError, ValueError, IndexError):
            clock_khz = 0
    return l2_bytes, clock_khz


def get_device_properties(device: DeviceLike = None) -> _OpenRegDeviceProperties:
    """Properties of an openreg device (like torch.cuda.get_device_properties)."""
    index = _checked_index(device)
    cores = _usable_cores()
    l2_bytes, clock_khz = _host_cpu_facts()
    return _OpenRegDeviceProperties(
        name=get_device_name(index),
        major=_CAPABILITY[0],
        minor=_CAPABILITY[1],
        total_memory=_C._mem_get_info(index)[1],
        multi_processor_count=cores,
        is_integrated=0,
        is_multi_gpu_board=0,
        max_threads_per_multi_processor=1,
        max_threads_per_block=cores,
        warp_size=1,
        regs_per_multiprocessor=0,
        shared_memory_per_block=0,
        shared_memory_per_multiprocessor=0,
        shared_memory_per_block_optin=0,
        L2_cache_size=l2_bytes,
        clock_rate=clock_khz,
        memory_clock_rate=0,
        memory_bus_width=0,
        uuid=str(uuid.uuid5(uuid.NAMESPACE_URL, f"openreg://{socket.gethostname()}/{index}")),
        pci_bus_id=0,
        pci_device_id=index,
        pci_domain_id=0,
        gcnArchName="",
    )


def get_device_capability(device: DeviceLike = None) -> tuple[int, int]:
    """(major, minor) capability of an openreg device: (1, 0), the simulated device's generation.

    For the dtypes the device supports, see ``torch.accelerator.get_device_capability``.
    """
    properties = get_device_properties(device)
    return properties.major, properties.minor


def can_device_access_peer(device: DeviceLike, peer_device: DeviceLike) -> bool:
    """True if kernels on ``device`` can read and write ``peer_device``'s memory.

    Work on any openreg stream reaches every device's memory (cross-device
    copies run as one kernel), so this holds for any two different devices; a
    device is not its own peer, as with CUDA.
    """
    if peer_device is None:
        raise ValueError("can_device_access_peer: pass the peer device (an index or 'openreg:N')")
    return _checked_index(device) != _checked_index(peer_device)


_SYNC_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}


def set_sync_debug_mode(debug_mode: int | str) -> None:
    """Warn (1, "warn") or raise (2, "error") on calls that wait for the device (0, "default": no).

    Like torch.cuda's: ``.item()``, ``.cpu()`` and other blocking copies between
    host and device, operators whose result size or value depends on tensor data
    (``nonzero``, boolean indexing, ``masked_select``, ``unique``, ``equal``, ...)
    and ``Stream.synchronize()``; not ``torch.openreg.synchronize()`` nor event
    synchronization. The warning points at the calling line.
    """
    if isinstance(debug_mode, str):
        if debug_mode not in _SYNC_DEBUG_MODES:
            raise RuntimeError(
                f"invalid value of debug_mode {debug_mode!r}, expected one of `default`, "
                "`warn`, `error`"
            )
        debug_mode = _SYNC_DEBUG_MODES[debug_mode]
    if isinstance(debug_mode, bool) or not isinstance(debug_mode, int):
        raise RuntimeError(
            f"invalid debug_mode {debug_mode!r}: expected 0, 1, 2 or `default`, `warn`, `error`"
        )
    if debug_mode not in _SYNC_DEBUG_MODES.values():
        raise RuntimeError(f"invalid value of debug_mode {debug_mode}, expected one of 0,1,2")
    _C._set_sync_debug_mode(debug_mode)


def get_sync_debug_mode() -> int:
    """The current sync debug mode: 0 (default), 1 (warn) or 2 (error)."""
    return _C._get_sync_debug_mode()


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
    "MemPool",
    "OutOfMemoryError",
    "Stream",
    "StreamContext",
    "_utils",
    "amp",
    "caching_allocator_alloc",
    "caching_allocator_delete",
    "can_device_access_peer",
    "current_device",
    "current_stream",
    "debug",
    "default_stream",
    "device",
    "device_count",
    "device_of",
    "empty_cache",
    "get_amp_supported_dtype",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "get_per_process_memory_fraction",
    "get_rng_state",
    "get_rng_state_all",
    "get_sync_debug_mode",
    "host_memory_stats",
    "host_memory_stats_as_nested_dict",
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
    "memory_snapshot",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "memory_summary",
    "reset_accumulated_host_memory_stats",
    "reset_accumulated_memory_stats",
    "reset_peak_host_memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_per_process_memory_fraction",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "set_sync_debug_mode",
    "stream",
    "synchronize",
    "use_mem_pool",
    "utilization",
]
