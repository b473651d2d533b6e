"""Shared measurement machinery of the benchmark suite.

Every figure compares openreg with a peer measured in the same process run (the CPU
backend, the CPU allocator, a host memcpy, or another import), interleaving the two so
that load from other processes hits both alike, and reports medians over repeats.
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

TIMES = "\u00d7"  # the multiplication sign, after ratios

# Default measurement effort; --quick divides it.
REPEATS = 15
MIN_BATCH_SECONDS = 0.04
MAX_CALLS = 20_000


@dataclass
class Settings:
    """Effort knobs shared by all families (from the command line)."""

    repeats: int = REPEATS
    min_batch_seconds: float = MIN_BATCH_SECONDS


@dataclass
class Figure:
    """One row of the results table, with the raw numbers behind it.

    ``kind`` says how ``value`` compares with ``target``:
    ``ratio_max`` (value ≤ target), ``ratio_min`` (value ≥ target),
    ``abs_us_max`` (value in µs ≤ target), ``ms_max`` (value in ms ≤ target),
    ``info`` (no target: a ratio reported for context or as the comparison peer),
    ``info_ms`` (no target: a duration in ms, for context).
    """

    family: str
    name: str
    kind: str
    value: float | None
    target: float | None
    openreg: float | None = None  # the openreg measurement (seconds, or bytes/s)
    peer: float | None = None  # what it is compared with, same unit
    unit: str = "s"  # or "B/s" (bandwidth) or "instructions"
    note: str = ""
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        if self.value is None:
            return "n/a"
        if self.target is None or self.kind.startswith("info"):
            return "info"
        if self.kind in ("ratio_max", "abs_us_max", "ms_max"):
            return "met" if self.value <= self.target else "MISSED"
        if self.kind == "ratio_min":
            return "met" if self.value >= self.target else "MISSED"
        raise ValueError(f"unknown figure kind {self.kind!r}")

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status
        return data


def ratio_figure(
    family: str, name: str, pair: Pair, target: float | None, raw: dict[str, Any]
) -> Figure:
    """A figure whose value is the paired openreg/peer time ratio (lower is better)."""
    return Figure(
        family=family,
        name=name,
        kind="ratio_max",
        value=pair.paired_ratio,
        target=target,
        openreg=pair.openreg_median,
        peer=pair.peer_median,
        raw={**raw, **pair.raw()},
    )


def format_seconds(seconds: float | None) -> str:
    """A duration in the most readable unit."""
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.3f} s"


def format_measured(figure: Figure) -> str:
    if figure.value is None:
        return "n/a"
    if figure.kind == "abs_us_max":
        return f"{figure.value:+.2f} µs"
    if figure.kind in ("ms_max", "info_ms"):
        return f"{figure.value:.1f} ms"
    return f"{figure.value:.3f}{TIMES}"


def format_target(figure: Figure) -> str:
    if figure.target is None:
        return "-"
    if figure.kind == "abs_us_max":
        return f"≤ CPU + {figure.target:g} µs"
    if figure.kind == "ms_max":
        return f"≤ {figure.target:g} ms"
    if figure.kind == "ratio_min":
        return f"≥ {figure.target:g}{TIMES}"
    return f"≤ {figure.target:g}{TIMES}"


def format_side(figure: Figure, value: float | None) -> str:
    if value is None:
        return "-"
    if figure.unit == "B/s":
        return f"{value / 2**30:.2f} GiB/s"
    if figure.unit == "instructions":
        return f"{value / 1e6:.2f} M instr."
    return format_seconds(value)


def _timed_batch(fn: Callable[[], object], calls: int, sync: Callable[[], None] | None) -> float:
    """Seconds per call of ``calls`` back-to-back calls, waiting for the device at the end."""
    if sync is not None:
        sync()  # start from an idle device
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    if sync is not None:
        sync()
    return (time.perf_counter() - start) / calls


def _timed_batch_with_cpu(
    fn: Callable[[], object], calls: int, sync: Callable[[], None] | None
) -> tuple[float, float]:
    """Wall and process CPU seconds per call (every thread of the process), as _timed_batch."""
    if sync is not None:
        sync()
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(calls):
        fn()
    if sync is not None:
        sync()
    return (time.perf_counter() - start) / calls, (time.process_time() - cpu_start) / calls


@dataclass
class Pair:
    """Interleaved measurements of openreg and its peer: per-call seconds per repeat."""

    openreg: list[float]
    peer: list[float]
    calls: int

    @property
    def openreg_median(self) -> float:
        return statistics.median(self.openreg)

    @property
    def peer_median(self) -> float:
        return statistics.median(self.peer)

    @property
    def ratio(self) -> float:
        """Median openreg time over median peer time."""
        return self.openreg_median / self.peer_median

    @property
    def paired_ratio(self) -> float:
        """Median of the per-repeat ratios, each from two adjacent batches: the reported figure.

        Load from other processes changes on a scale of seconds; two adjacent batches
        see the same load, so their ratio is steadier than the ratio of two medians
        (which is recorded too)."""
        return statistics.median(o / p for o, p in zip(self.openreg, self.peer, strict=True))

    @property
    def paired_difference(self) -> float:
        """Median of the per-repeat differences openreg - peer (seconds per call)."""
        return statistics.median(o - p for o, p in zip(self.openreg, self.peer, strict=True))

    def raw(self) -> dict[str, Any]:
        return {
            "calls_per_batch": self.calls,
            "openreg_seconds": self.openreg,
            "peer_seconds": self.peer,
            "openreg_median": self.openreg_median,
            "peer_median": self.peer_median,
            "ratio_of_medians": self.ratio,
            "median_of_paired_ratios": self.paired_ratio,
            "median_of_paired_differences": self.paired_difference,
        }


def compare(
    openreg_fn: Callable[[], object],
    peer_fn: Callable[[], object],
    sync: Callable[[], None] | None,
    settings: Settings,
    *,
    warmup: int = 5,
    calls: int | None = None,
    min_batch_seconds: float | None = None,
) -> Pair:
    """Time ``openreg_fn`` (followed by ``sync``) against ``peer_fn``, interleaved.

    Each repeat times one batch of each, alternating which goes first; a batch is
    ``calls`` back-to-back calls (by default enough for ``settings.min_batch_seconds``
    on the slower side), so the throughput of an asynchronous device is measured
    (its queue is drained by ``sync`` at the end of the batch, not after each call).
    """
    for _ in range(warmup):  # first calls of a signature run synchronously: not measured
        openreg_fn()
        peer_fn()
    if sync is not None:
        sync()
    if calls is None:
        batch = settings.min_batch_seconds if min_batch_seconds is None else min_batch_seconds
        probe = max(_timed_batch(openreg_fn, 3, sync), _timed_batch(peer_fn, 3, None))
        calls = min(MAX_CALLS, max(1, math.ceil(batch / max(probe, 1e-9))))
    openreg_times: list[float] = []
    peer_times: list[float] = []
    gc.collect()
    gc.disable()
    try:
        for repeat in range(settings.repeats):
            if repeat % 2 == 0:
                openreg_times.append(_timed_batch(openreg_fn, calls, sync))
                peer_times.append(_timed_batch(peer_fn, calls, None))
            else:
                peer_times.append(_timed_batch(peer_fn, calls, None))
                openreg_times.append(_timed_batch(openreg_fn, calls, sync))
    finally:
        gc.enable()
    return Pair(openreg_times, peer_times, calls)


def compare_with_cpu_time(
    openreg_fn: Callable[[], object],
    peer_fn: Callable[[], object],
    sync: Callable[[], None] | None,
    settings: Settings,
    *,
    warmup: int = 5,
    min_batch_seconds: float | None = None,
) -> tuple[Pair, Pair]:
    """As compare(), timing each batch in wall time and in process CPU time: (wall, cpu).

    Process CPU time counts every thread: for openreg the host thread and the stream
    worker that runs the kernels (and the autograd engine's device thread), for the CPU
    the one thread that does both."""
    for _ in range(warmup):
        openreg_fn()
        peer_fn()
    if sync is not None:
        sync()
    batch = settings.min_batch_seconds if min_batch_seconds is None else min_batch_seconds
    probe = max(_timed_batch(openreg_fn, 3, sync), _timed_batch(peer_fn, 3, None))
    calls = min(MAX_CALLS, max(1, math.ceil(batch / max(probe, 1e-9))))
    times: dict[str, list[tuple[float, float]]] = {"openreg": [], "peer": []}
    gc.collect()
    gc.disable()
    try:
        for repeat in range(settings.repeats):
            sides = [("openreg", openreg_fn, sync), ("peer", peer_fn, None)]
            for side, fn, side_sync in sides if repeat % 2 == 0 else reversed(sides):
                times[side].append(_timed_batch_with_cpu(fn, calls, side_sync))
    finally:
        gc.enable()
    wall = Pair([t[0] for t in times["openreg"]], [t[0] for t in times["peer"]], calls)
    cpu = Pair([t[1] for t in times["openreg"]], [t[1] for t in times["peer"]], calls)
    return wall, cpu


# The first eight columns of /proc/stat's "cpu" line; the later guest columns are
# already counted in "user" and "nice", so they are left out of every sum.
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def cpu_jiffies() -> dict[str, int] | None:
    """Jiffies of all CPUs since boot by kind, from /proc/stat; None where there is none."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            values = [int(value) for value in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return dict(zip(CPU_FIELDS, values, strict=False))


def _busy_and_total(jiffies: dict[str, int]) -> tuple[int, int]:
    total = sum(jiffies.values())
    return total - jiffies["idle"] - jiffies.get("iowait", 0), total


def steal_share(before: dict[str, int] | None, after: dict[str, int] | None) -> float | None:
    """Share of the CPU time between two snapshots that the hypervisor gave to other guests."""
    if before is None or after is None or "steal" not in after:
        return None
    total = sum(after.values()) - sum(before.values())
    return round((after["steal"] - before["steal"]) / total, 4) if total > 0 else None


def busy_cores_now(window_seconds: float = 1.0) -> float | None:
    """Cores kept busy by other processes right now (this one sleeps while measuring).

    Unlike the load average, which still remembers the wheel build that precedes a
    ``nox -s bench`` run for minutes, this sees only what competes with the run."""
    before = cpu_jiffies()
    time.sleep(window_seconds)
    after = cpu_jiffies()
    if before is None or after is None:
        return None
    (busy_before, total_before), (busy_after, total_after) = map(_busy_and_total, (before, after))
    if total_after == total_before:
        return None
    share = (busy_after - busy_before) / (total_after - total_before)
    return round(share * (os.cpu_count() or 1), 2)


def machine_info() -> dict[str, Any]:
    """What the numbers depend on: cores, load, versions."""
    import platform

    import torch

    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "load_average": list(os.getloadavg()),
        "busy_cores_before_run": busy_cores_now(),
        "torch_version": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            models = {line.split(":", 1)[1].strip() for line in cpuinfo if "model name" in line}
        info["cpu_model"] = sorted(models)
    except OSError:
        pass
    return info
