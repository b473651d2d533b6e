"""Family 7: torch.compile on openreg against torch.compile on the CPU.

For the training steps of family 3 (the MLP and the Transformer encoder):

* **speed-up**: what compiling gains on openreg (eager step time over compiled
  step time) divided by what it gains on the CPU. Both sides are measured as in
  family 3 (interleaved batches, median of paired ratios), once eager and once
  compiled; the figure is (openreg/CPU eager) / (openreg/CPU compiled).
* **compile time**: the first call of the compiled step (Dynamo, AOTAutograd,
  Inductor and the C++ compiler for forward and backward, then one step) on
  openreg over the same on the CPU, each with fresh Inductor caches so nothing is
  reused; the two alternate which goes first over the repeats.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from benchmarks.common import MIN_BATCH_SECONDS, TIMES, Figure, Settings, compare
from benchmarks.training import BATCH_SECONDS, MODELS

FAMILY = "7 torch.compile"
SPEEDUP_TARGET = 0.90  # openreg's compiled/eager speed-up is at least 90% of the CPU's
COMPILE_TIME_TARGET = 1.20
QUICK_MODELS = ("MLP 256-512-512-10, batch 64, SGD",)


def _step_fn(
    model: nn.Module,
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
    data: tuple[torch.Tensor, torch.Tensor],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    device: str,
    compiled: bool,
) -> Callable[[], None]:
    torch.manual_seed(3)
    model = copy.deepcopy(model).to(device)
    model.train()
    optimizer = make_optimizer(model)
    inputs, target = (t.to(device) for t in data)
    forward = torch.compile(model) if compiled else model
    synchronize = torch.openreg.synchronize if device.startswith("openreg") else None

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(forward(inputs), target)
        loss.backward()
        optimizer.step()
        if synchronize is not None:
            synchronize()

    return step


def _first_call_seconds(step: Callable[[], None]) -> float:
    from torch._inductor.utils import fresh_cache

    torch._dynamo.reset()
    with fresh_cache():
        start = time.perf_counter()
        step()
        return time.perf_counter() - start


def _warm_up_compiler() -> None:
    """Import and initialise the compiler stack once, outside any timing."""
    from torch._inductor.utils import fresh_cache

    with fresh_cache():
        for device in ("cpu", "openreg"):
            torch.compile(lambda x: (x * 2).relu())(torch.ones(4, device=device))
    torch.openreg.synchronize()


def run(settings: Settings, quick: bool = False) -> list[Figure]:
    _warm_up_compiler()
    figures: list[Figure] = []
    names = QUICK_MODELS if quick else tuple(MODELS)
    batch = BATCH_SECONDS * settings.min_batch_seconds / MIN_BATCH_SECONDS
    for name in names:
        workload = MODELS[name]()

        def step(device: str, compiled: bool, workload: tuple = workload) -> Callable[[], None]:
            return _step_fn(*workload, device, compiled)

        # Compile time, fresh caches, alternating which device goes first.
        first_calls: dict[str, list[float]] = {"openreg": [], "cpu": []}
        rounds = 1 if quick else 2
        for round_index in range(rounds):
            order = ("cpu", "openreg") if round_index % 2 == 0 else ("openreg", "cpu")
            for device in order:
                first_calls[device].append(_first_call_seconds(step(device, True)))
        openreg_compile = statistics.median(first_calls["openreg"])
        cpu_compile = statistics.median(first_calls["cpu"])
        figures.append(
            Figure(
                family=FAMILY,
                name=f"compile time (first call): {name}",
                kind="ratio_max",
                value=openreg_compile / cpu_compile,
                target=COMPILE_TIME_TARGET,
                openreg=openreg_compile,
                peer=cpu_compile,
                raw={"model": name, "first_call_seconds": first_calls},
            )
        )

        # Speed-up of compiling, openreg over CPU.
        eager = compare(step("openreg", False), step("cpu", False), torch.openreg.synchronize,
                        settings, warmup=3, min_batch_seconds=batch)  # fmt: skip
        compiled = compare(step("openreg", True), step("cpu", True), torch.openreg.synchronize,
                           settings, warmup=3, min_batch_seconds=batch)  # fmt: skip
        openreg_speedup = eager.openreg_median / compiled.openreg_median
        cpu_speedup = eager.peer_median / compiled.peer_median
        figures.append(
            Figure(
                family=FAMILY,
                name=f"compiled/eager speed-up, openreg over CPU: {name}",
                kind="ratio_min",
                value=eager.paired_ratio / compiled.paired_ratio,
                target=SPEEDUP_TARGET,
                openreg=compiled.openreg_median,
                peer=compiled.peer_median,
                note=f"speed-up openreg {openreg_speedup:.2f}{TIMES}, CPU {cpu_speedup:.2f}{TIMES}",
                raw={"model": name, "eager": eager.raw(), "compiled": compiled.raw()},
            )
        )
        print(f"  compile: {name}: first call openreg {openreg_compile:.1f} s, "
              f"cpu {cpu_compile:.1f} s; compiled step openreg "
              f"{compiled.openreg_median * 1e3:.2f} ms, "
              f"cpu {compiled.peer_median * 1e3:.2f} ms; "
              f"speed-up openreg {openreg_speedup:.2f}x, cpu {cpu_speedup:.2f}x",
              flush=True)  # fmt: skip
    return figures
