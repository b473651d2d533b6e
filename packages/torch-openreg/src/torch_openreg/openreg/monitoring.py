"""Device monitoring across processes: ``utilization`` and ``list_gpu_processes``.

Mirror ``torch.cuda.utilization`` and ``torch.cuda.list_gpu_processes`` (which ask
NVML), reading the OpenReg runtime's process registry instead: every process that
activated a device publishes its memory use and busy time there, the same data
``openreg-smi`` shows (see docs/device-registry.md). Only the calling user's
processes are visible.
"""

from __future__ import annotations

import openreg_runtime

from ._utils import DeviceLike
from .devices import checked_index

_MIB = 1024 * 1024


def utilization(device: DeviceLike = None) -> int:
    """Percent of the past sample period (1 s) in which work ran on ``device``.

    ``device`` defaults to the current device. As with ``nvidia-smi``, the figure
    covers every process of this user using the device; their shares are summed
    and capped at 100 (simulated devices of different processes run side by side).
    """
    return openreg_runtime.utilization(checked_index(device))


def list_gpu_processes(device: DeviceLike = None) -> str:
    """The processes using ``device`` and their device memory, in torch.cuda's layout.

    ``device`` defaults to the current device. One line per process:
    ``process <pid> uses <MB> MB GPU memory`` (MB meaning MiB, as in torch.cuda).
    """
    index = checked_index(device)
    processes = [u for u in openreg_runtime.process_usage() if u.device == index]
    lines = [f"GPU:{index}"]
    if not processes:
        lines.append("no processes are running")
    for process in processes:
        mem = process.bytes_in_use / _MIB
        lines.append(f"process {process.pid:>10d} uses {mem:>12.3f} MB GPU memory")
    return "\n".join(lines)


__all__ = ["list_gpu_processes", "utilization"]
