"""The CPU-only tax: what loading torch_openreg costs work that never uses openreg.

With the openreg-autoload shim, every process that imports torch loads the binding, so
the binding must not slow down pure-CPU work. Two fresh interpreters train the same
CPU-only models on one thread, one without the binding (``OPENREG_AUTOLOAD=0``) and one
with ``import torch_openreg``; the figure is with / without, per training step.

It is judged on instructions executed per step, counted by callgrind: a 1% target
needs a measure steadier than 1%, and the step's time is not one. Thread CPU time of
the same steps in fresh interpreters spreads by about ±10% from process to process
whether or not the binding is loaded (benchmarks/README.md), while the instruction
count repeats to within 0.1% and is what extra work by the binding would raise. The
time figures are still reported, for context. Without valgrind (and a C compiler for
``callgrind_region.c``) the instruction figures are n/a.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.common import Figure, Settings

CPU_TAX_TARGET = 1.01
STEPS = 40
# Instruction counts repeat closely, so few steps and rounds settle them; each
# round is two interpreters under valgrind (about a minute each on an idle core).
COUNTED_STEPS = 10
COUNTED_ROUNDS = 2
ROOT = Path(__file__).resolve().parents[1]
REGION_SOURCE = Path(__file__).with_name("callgrind_region.c")

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

# Runs under callgrind with instrumentation off; the region library counts the steps.
COUNTING_CHILD = """
import ctypes, json, os, sys
import torch
torch.set_num_threads(1)
if os.environ["CPU_TAX_VARIANT"] == "with":
    import torch_openreg
from benchmarks.cpu_tax import WORKLOADS, count_steps
region = ctypes.CDLL(sys.argv[2])
for name, build in WORKLOADS.items():
    count_steps(build, int(sys.argv[1]), region, name)
print(json.dumps({"loaded": "torch_openreg" in sys.modules}))
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


def _train_step(model: Any, optimizer: Any, data: tuple[Any, Any]) -> None:
    import torch

    inputs, targets = data
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(inputs), targets).backward()
    optimizer.step()


def step_times(build: Any, steps: int) -> list[float]:
    """CPU seconds of this thread per training step (after warm-up) of ``build``'s workload."""
    import time

    model, optimizer, data = build()
    times = []
    for index in range(steps + 5):
        start = time.thread_time()
        _train_step(model, optimizer, data)
        if index >= 5:
            times.append(time.thread_time() - start)
    return times


def count_steps(build: Any, steps: int, region: Any, name: str) -> None:
    """Run ``steps`` training steps (after warm-up) inside a callgrind region named ``name``."""
    model, optimizer, data = build()
    for _ in range(5):
        _train_step(model, optimizer, data)
    region.region_start()
    for _ in range(steps):
        _train_step(model, optimizer, data)
    region.region_stop(name.encode())


def _child_env(variant: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENREG_")}
    env["OPENREG_AUTOLOAD"] = "0"  # the shim (if installed) stays out of both variants
    env["CPU_TAX_VARIANT"] = variant
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _run(variant: str, steps: int) -> dict[str, Any]:
    output = subprocess.run(
        [sys.executable, "-c", CHILD, str(steps)], env=_child_env(variant), capture_output=True,
        text=True, check=True,
    )  # fmt: skip
    return json.loads(output.stdout)


def _build_region_library(folder: Path) -> Path | None:
    """callgrind_region.c as a shared library, or None without valgrind or a C compiler."""
    compiler = sysconfig.get_config_var("CC") or "cc"
    compiler = shutil.which(compiler.split()[0]) or shutil.which("cc")
    if shutil.which("valgrind") is None or compiler is None:
        return None
    library = folder / "libcallgrind_region.so"
    built = subprocess.run(
        [compiler, "-O2", "-shared", "-fPIC", str(REGION_SOURCE), "-o", str(library)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return library if built.returncode == 0 else None


def _count(variant: str, library: Path, folder: Path) -> dict[str, Any]:
    """Instructions per step of each workload in one interpreter of ``variant``."""
    out = folder / variant
    out.mkdir()
    command = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", "--dump-instr=no",
        "--dump-line=no", "--smc-check=all-non-file",  # oneDNN writes kernels at run time
        f"--callgrind-out-file={out}/callgrind.%p.out",
        sys.executable, "-c", COUNTING_CHILD, str(COUNTED_STEPS), str(library),
    ]  # fmt: skip
    result = subprocess.run(
        command, env=_child_env(variant), capture_output=True, text=True, check=True
    )
    counts = {"loaded": json.loads(result.stdout)["loaded"]}
    for dump in out.glob("callgrind.*.out*"):
        region = region_total(dump.read_text())
        if region is not None and region[0] in WORKLOADS:
            counts[region[0]] = region[1] / COUNTED_STEPS
    missing = set(WORKLOADS) - set(counts)
    if missing:
        raise RuntimeError(f"callgrind wrote no dump for {sorted(missing)} in {out}")
    return counts


def region_total(dump: str) -> tuple[str, int] | None:
    """(region name, instructions) of a callgrind dump written by ``region_stop``."""
    trigger = re.search(r"^desc: Trigger: Client Request: (.+)$", dump, re.MULTILINE)
    total = re.search(r"^totals: (\d+)$", dump, re.MULTILINE)
    if trigger is None or total is None:
        return None  # the dump at program exit, or not callgrind's format
    return trigger.group(1), int(total.group(1))


def instruction_samples() -> dict[str, list[dict[str, Any]]] | None:
    """Instructions per step of both variants, COUNTED_ROUNDS rounds (None: no valgrind)."""
    samples: dict[str, list[dict[str, Any]]] = {"without": [], "with": []}
    with tempfile.TemporaryDirectory(prefix="openreg-cpu-tax-") as scratch:
        folder = Path(scratch)
        library = _build_region_library(folder)
        if library is None:
            return None
        for index in range(COUNTED_ROUNDS):
            rounds = folder / f"round{index}"
            rounds.mkdir()
            # Counts do not depend on timing, so the two variants share the cores.
            with ThreadPoolExecutor(max_workers=2) as pool:
                futures = {v: pool.submit(_count, v, library, rounds) for v in samples}
            for variant, future in futures.items():
                samples[variant].append(future.result())
    return samples


def _check_variants(samples: dict[str, list[dict[str, Any]]]) -> None:
    if any(s["loaded"] for s in samples["without"]) or not all(
        s["loaded"] for s in samples["with"]
    ):
        raise RuntimeError("the variants did not load the binding as intended")


def _paired_ratios(samples: dict[str, list[dict[str, Any]]], name: str) -> list[float]:
    pairs = zip(samples["with"], samples["without"], strict=True)
    return [loaded[name] / unloaded[name] for loaded, unloaded in pairs]


def _instruction_figures(family: str) -> list[Figure]:
    samples = instruction_samples()
    figures = []
    for name in WORKLOADS:
        figure = Figure(
            family=family,
            name=f"CPU-only {name} training step, binding loaded / not [instructions]",
            kind="ratio_max", value=None, target=CPU_TAX_TARGET, unit="instructions",
        )  # fmt: skip
        if samples is None:
            figure.note = "needs valgrind and a C compiler (benchmarks/callgrind_region.c)"
        else:
            _check_variants(samples)
            ratios = _paired_ratios(samples, name)
            figure.value = statistics.median(ratios)
            figure.openreg = statistics.median(s[name] for s in samples["with"])
            figure.peer = statistics.median(s[name] for s in samples["without"])
            figure.raw = {"steps": COUNTED_STEPS, "ratios": ratios, "samples": samples}
        figures.append(figure)
    return figures


def _time_figures(family: str, settings: Settings) -> list[Figure]:
    rounds = max(3, settings.repeats)
    samples: dict[str, list[dict[str, Any]]] = {"without": [], "with": []}
    order = ["without", "with"]
    for _ in range(rounds):
        for variant in order:
            samples[variant].append(_run(variant, STEPS))
        order.reverse()
    _check_variants(samples)
    figures = []
    for name in WORKLOADS:
        ratios = _paired_ratios(samples, name)
        figure = Figure(
            family=family,
            name=f"CPU-only {name} training step, binding loaded / not [CPU time]",
            kind="info",  # context only: the process-to-process spread exceeds the target
            value=statistics.median(ratios), target=None,
            openreg=statistics.median(s[name] for s in samples["with"]),
            peer=statistics.median(s[name] for s in samples["without"]),
            raw={"rounds": rounds, "steps": STEPS, "ratios": ratios, "samples": samples},
        )  # fmt: skip
        figures.append(figure)
    return figures


def run(settings: Settings) -> list[Figure]:
    family = "8 CPU-only tax"
    return _instruction_figures(family) + _time_figures(family, settings)
