"""The CPU-only tax: what loading torch_openreg costs work that never uses openreg.

With the openreg-autoload shim, every process that imports torch loads the binding, so
the binding must not slow down pure-CPU work. Each round runs two fresh interpreters
that train the same CPU-only models, one without the binding (``OPENREG_AUTOLOAD=0``)
and one with ``import torch_openreg``, alternating which goes first; each reports the
median time of its training steps, and the figure is the median over rounds of the
per-round ratio. The children run on one thread and report the thread's CPU time per step:
the tax is a per-operation cost, and CPU time is what other processes on a loaded machine
disturb least (as in the import family).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.common import Figure, Settings

CPU_TAX_TARGET = 1.01
STEPS = 40
ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, os, statistics, sys, time
import torch
torch.set_num_threads(1)
if os.environ["CPU_TAX_VARIANT"] == "with":
    import torch_openreg
from benchmarks.cpu_tax import WORKLOADS, step_times
loaded = "torch_openreg" in sys.modules
print(json.dumps({"loaded": loaded,
                  **{name: statistics.median(step_times(build, int(sys.argv[1])))
                     for name, build in WORKLOADS.items()}}))
"""


def _conv_net() -> tuple[Any, Any, tuple[Any, Any]]:
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(32, 10),
    )  # fmt: skip
    data = (torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,)))
    return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), data


def _mlp() -> tuple[Any, Any, tuple[Any, Any]]:
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
    )
    data = (torch.randn(64, 256), torch.randint(0, 10, (64,)))
    return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), data


WORKLOADS = {"conv-net": _conv_net, "MLP": _mlp}


def step_times(build: Any, steps: int) -> list[float]:
    """CPU seconds of this thread per training step (after warm-up) of ``build``'s workload."""
    import time

    import torch

    model, optimizer, (inputs, targets) = build()
    times = []
    for index in range(steps + 5):
        start = time.thread_time()
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(inputs), targets).backward()
        optimizer.step()
        if index >= 5:
            times.append(time.thread_time() - start)
    return times


def _run(variant: str, steps: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENREG_")}
    env["OPENREG_AUTOLOAD"] = "0"  # the shim (if installed) stays out of both variants
    env["CPU_TAX_VARIANT"] = variant
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    output = subprocess.run(
        [sys.executable, "-c", CHILD, str(steps)], env=env, capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    return json.loads(output.stdout)


def run(settings: Settings) -> list[Figure]:
    family = "8 CPU-only tax"
    rounds = max(3, settings.repeats)
    samples: dict[str, list[dict[str, Any]]] = {"without": [], "with": []}
    order = ["without", "with"]
    for _ in range(rounds):
        for variant in order:
            samples[variant].append(_run(variant, STEPS))
        order.reverse()
    loaded = [s["loaded"] for s in samples["with"]]
    if any(s["loaded"] for s in samples["without"]) or not all(loaded):
        raise RuntimeError("the variants did not load the binding as intended")
    figures = []
    for name in WORKLOADS:
        pairs = zip(samples["with"], samples["without"], strict=True)
        ratios = [loaded[name] / unloaded[name] for loaded, unloaded in pairs]
        figures.append(
            Figure(
                family=family,
                name=f"CPU-only {name} training step, binding loaded / not [CPU time]",
                kind="ratio_max",
                value=statistics.median(ratios),
                target=CPU_TAX_TARGET,
                openreg=statistics.median(s[name] for s in samples["with"]),
                peer=statistics.median(s[name] for s in samples["without"]),
                raw={"rounds": rounds, "steps": STEPS, "ratios": ratios, "samples": samples},
            )
        )
    return figures
