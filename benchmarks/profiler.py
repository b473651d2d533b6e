"""Family 10: the cost of profiling a training step on openreg.

Family 3's MLP step (SGD with momentum, synchronized at the end of every step),
timed inside ``torch.profiler.profile(activities=[CPU, PrivateUse1])`` against the
same step unprofiled, in interleaved batches. The profiled batch is timed between
entering and leaving the profile, so the profiler's start-up and its post-processing
(Kineto collecting and linking the trace when the profile ends) are not part of it:
the figure is what recording costs a running step — host operator events, one device
event per kernel and copy, and their correlation.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

from torch.profiler import ProfilerActivity, profile

from benchmarks.common import MIN_BATCH_SECONDS, Figure, Pair, Settings, ratio_figure
from benchmarks.training import MODELS, _step_fn

PROFILED_RATIO_TARGET = 1.5
BATCH_SECONDS = 0.25
ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
MODEL = "MLP 256-512-512-10, batch 64, SGD"


def _batch(step: Callable[[], None], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        step()
    return (time.perf_counter() - start) / calls


def _profiled_batch(step: Callable[[], None], calls: int) -> float:
    with profile(activities=ACTIVITIES):
        seconds = _batch(step, calls)
    return seconds


def measure(settings: Settings) -> Pair:
    model, make_optimizer, data, loss_fn = MODELS[MODEL]()
    step = _step_fn(model, make_optimizer, data, loss_fn, "openreg")
    for _ in range(3):
        step()
    _profiled_batch(step, 3)  # Kineto's first session initialises it
    batch = BATCH_SECONDS * settings.min_batch_seconds / MIN_BATCH_SECONDS
    calls = max(1, round(batch / max(_batch(step, 3), 1e-9)))
    profiled: list[float] = []
    plain: list[float] = []
    for repeat in range(settings.repeats):
        gc.collect()
        gc.disable()
        try:
            if repeat % 2 == 0:
                profiled.append(_profiled_batch(step, calls))
                plain.append(_batch(step, calls))
            else:
                plain.append(_batch(step, calls))
                profiled.append(_profiled_batch(step, calls))
        finally:
            gc.enable()
    return Pair(profiled, plain, calls)


def run(settings: Settings) -> list[Figure]:
    pair = measure(settings)
    figure = ratio_figure(
        "11 profiler",
        f"{MODEL} step, profiled (CPU + PrivateUse1) / unprofiled",
        pair,
        PROFILED_RATIO_TARGET,
        {"model": MODEL, "activities": "CPU, PrivateUse1"},
    )
    figure.note = "openreg on both sides: the peer is the unprofiled step"
    print(
        f"  profiler: profiled {pair.openreg_median * 1e3:.2f} ms, "
        f"unprofiled {pair.peer_median * 1e3:.2f} ms per step "
        f"(median paired ratio {pair.paired_ratio:.3f})",
        flush=True,
    )
    return [figure]
