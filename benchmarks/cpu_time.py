"""Family 12: CPU efficiency — the process CPU time of a training step, openreg over CPU.

openreg runs every kernel on a stream worker thread while the host thread goes on
launching, so a step that takes no longer than on the CPU can still cost the process
more CPU time: the host's bookkeeping per launch, the worker's per kernel, and the
time threads spend handing work to each other. On a shared machine that CPU time is
what other jobs pay for, so it has targets of its own.

Measured in a fresh process with OMP_NUM_THREADS=1 (read when torch loads, hence the
child): one kernel thread per side, so the figure compares bookkeeping, not OpenMP
teams. Each model trains on both devices in the same process (same initial weights and
data, each device's default optimizer implementation), in batches of steps interleaved
as in family 3 (openreg synchronized at the end of every step); every batch is timed in
wall time and in process CPU time (``time.process_time``: all threads of the process).
The models: family 3's MLP and Transformer, and a GPT-2-style language model built from
torch.nn modules (2 blocks, d=64, 4 heads, vocabulary 128, 16 tokens, batch 4, AdamW).
Targets: CPU time at most 1.20x the CPU's for each model; the GPT-2-style step's wall
time at most 1.05x the CPU's (the other two models' wall times are family 3's figures).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from benchmarks.common import Figure, Settings  # noqa: E402

FAMILY = "12 CPU time (OMP_NUM_THREADS=1)"
CPU_TIME_TARGET = 1.20
GPT2_WALL_TARGET = 1.05

CHILD = """
import json, sys
import torch
import torch_openreg
from benchmarks.common import Settings
from benchmarks.cpu_time import measure
settings = Settings(repeats=int(sys.argv[1]), min_batch_seconds=float(sys.argv[2]))
print(json.dumps([figure.as_dict() for figure in measure(settings)]))
"""


def measure(settings: Settings) -> list[Figure]:
    """The figures, measured in this process (the child: OMP_NUM_THREADS=1 already set)."""
    import torch

    from benchmarks import training
    from benchmarks.common import MIN_BATCH_SECONDS, compare_with_cpu_time, ratio_figure

    torch.openreg.init()
    workloads = {**training.MODELS, training.GPT2_NAME: training._gpt2}
    figures = []
    for name, make in workloads.items():
        model, make_optimizer, data, loss_fn = make()
        openreg_step = training._step_fn(model, make_optimizer, data, loss_fn, "openreg")
        cpu_step = training._step_fn(model, make_optimizer, data, loss_fn, "cpu")
        batch = training.BATCH_SECONDS * settings.min_batch_seconds / MIN_BATCH_SECONDS
        wall, cpu = compare_with_cpu_time(
            openreg_step, cpu_step, torch.openreg.synchronize, settings, warmup=5,
            min_batch_seconds=batch,
        )  # fmt: skip
        raw = {"model": name, "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
        figures.append(ratio_figure(FAMILY, f"{name} [CPU time]", cpu, CPU_TIME_TARGET, raw))
        gpt2 = name == training.GPT2_NAME
        wall_figure = ratio_figure(FAMILY, f"{name} [wall]", wall, GPT2_WALL_TARGET, raw)
        if not gpt2:  # family 3 holds their wall-time targets
            wall_figure.kind, wall_figure.target = "info", None
        figures.append(wall_figure)
    return figures


def run(settings: Settings) -> list[Figure]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENREG_")}
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    command = [sys.executable, "-c", CHILD, str(settings.repeats), str(settings.min_batch_seconds)]
    output = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    figures = [Figure(**{k: v for k, v in f.items() if k != "status"})
               for f in json.loads(output.stdout.splitlines()[-1])]  # fmt: skip
    for figure in figures:
        print(f"  cpu time: {figure.name}: openreg {figure.openreg * 1e3:.2f} ms, "
              f"cpu {figure.peer * 1e3:.2f} ms ({figure.value:.3f}x)", flush=True)  # fmt: skip
    return figures
