"""What an openreg device is: its properties and capability, and the dtypes it computes.

The simulated device runs CPU kernels on the host's cores, so its properties
describe those cores (read from /sys and /proc) where torch.cuda reports a GPU's.
"""

from __future__ import annotations

import functools
import os
import socket
import uuid
from dataclasses import dataclass

import torch

from .. import _C
from ._utils import DeviceLike
from .devices import checked_index, get_device_name, is_available

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
    index = checked_index(device)
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


__all__ = [
    "get_amp_supported_dtype",
    "get_device_capability",
    "get_device_properties",
    "is_bf16_supported",
]
