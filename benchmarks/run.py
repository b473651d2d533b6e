#!/usr/bin/env python
"""Run the OpenReg benchmark suite: a table on stdout and the raw numbers as JSON.

    python benchmarks/run.py [--output benchmarks/results.json] [--families ops,training]
                             [--repeats 15] [--processes 3] [--quick]

(``uv run nox -s bench`` does this in an environment installed from the lock.)
Families: ``ops`` (1: measured by this script in ``--processes`` fresh subprocesses,
``--mode inplace``, whose repeats are pooled), ``copy-ops`` (2: the same operators with
OPENREG_FALLBACK=copy, one subprocess, ``--mode copy``), ``training`` (3),
``allocation`` (4), ``copies`` (5), ``imports`` (6), ``compile`` (7: torch.compile),
``distributed`` (9: two ranks), ``debug`` (10: training steps with OPENREG_DEBUG modes on),
``profiler`` (11: a profiled training step), ``cpu-time`` (12: process CPU time of training
steps, OMP_NUM_THREADS=1), ``graphs`` (13: replayed graphs), ``ipc`` (14: a tensor sent to
another process).
See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `python benchmarks/run.py` imports the benchmarks package

from benchmarks.common import (  # noqa: E402
    TIMES,
    Figure,
    Settings,
    cpu_jiffies,
    format_measured,
    format_side,
    format_target,
    machine_info,
    steal_share,
)

FAMILIES = (
    "ops",
    "copy-ops",
    "training",
    "allocation",
    "copies",
    "imports",
    "compile",
    "cpu-tax",
    "distributed",
    "debug",
    "profiler",
    "cpu-time",
    "graphs",
    "ipc",
)
DEFAULT_OUTPUT = ROOT / "benchmarks" / "results.json"
OPS_PROCESSES = 3  # family 1 is pooled over this many fresh processes
OPS_FAMILY = {"inplace": "1 ops (in-place fallback)", "copy": "2 ops (copy fallback, peer)"}


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="JSON results file")
    parser.add_argument(
        "--families",
        default=",".join(FAMILIES),
        help=f"comma-separated subset of {', '.join(FAMILIES)} (default: all)",
    )
    parser.add_argument("--repeats", type=int, default=None, help="repeats per figure")
    parser.add_argument("--quick", action="store_true", help="fewer, shorter repeats (smoke run)")
    parser.add_argument(
        "--processes",
        type=int,
        default=OPS_PROCESSES,
        help=f"fresh processes whose repeats family 1 pools (default {OPS_PROCESSES})",
    )
    parser.add_argument(
        "--mode",
        choices=("suite", "inplace", "copy"),
        default="suite",
        help=argparse.SUPPRESS,  # internal: a child measuring the operators in one fallback mode
    )
    args = parser.parse_args(argv)
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        parser.error(f"unknown families {unknown}; choose from {', '.join(FAMILIES)}")
    args.families = families
    if args.processes < 1:
        parser.error(f"--processes must be at least 1, got {args.processes}")
    return args


def settings_from(args: argparse.Namespace) -> Settings:
    settings = Settings()
    if args.quick:
        settings = Settings(repeats=5, min_batch_seconds=0.02)
    if args.repeats is not None:
        settings.repeats = args.repeats
    return settings


def import_torch(expected_mode: str) -> None:
    import torch

    import torch_openreg

    mode = torch_openreg._C._fallback_mode()
    if mode != expected_mode:
        raise SystemExit(f"expected OPENREG_FALLBACK mode {expected_mode!r}, got {mode!r}")
    torch.openreg.init()


def run_ops_child(args: argparse.Namespace, settings: Settings, mode: str) -> list[Figure]:
    """The operators in a fresh process: OPENREG_FALLBACK is read when torch_openreg is imported."""
    with tempfile.TemporaryDirectory() as directory:
        output = Path(directory) / "ops.json"
        command = [
            sys.executable, __file__, "--mode", mode, "--output", str(output),
            "--repeats", str(settings.repeats),
        ]  # fmt: skip
        if args.quick:
            command.append("--quick")
        env = {k: v for k, v in os.environ.items() if k != "OPENREG_FALLBACK"}
        if mode == "copy":
            env["OPENREG_FALLBACK"] = "copy"
        subprocess.run(command, env=env, check=True)
        data = json.loads(output.read_text())
    return [Figure(**{k: v for k, v in f.items() if k != "status"}) for f in data["figures"]]


def run_ops(
    args: argparse.Namespace, settings: Settings, mode: str, processes: int
) -> list[Figure]:
    from benchmarks import ops

    return ops.pool([run_ops_child(args, settings, mode) for _ in range(processes)])


def family_runner(name: str, args: argparse.Namespace, settings: Settings) -> list[Figure]:
    from benchmarks import (
        compiled,
        cpu_tax,
        cpu_time,
        debug_modes,
        distributed,
        graphs,
        imports,
        ipc,
        memory,
        profiler,
        training,
    )

    runners: dict[str, Callable[[], list[Figure]]] = {
        "ops": lambda: run_ops(args, settings, "inplace", args.processes),
        "copy-ops": lambda: run_ops(args, settings, "copy", 1),  # the peer: one process will do
        "training": lambda: training.run(settings),
        "allocation": lambda: memory.run_allocation(settings),
        "copies": lambda: memory.run_copies(settings),
        "imports": lambda: imports.run(settings),
        "compile": lambda: compiled.run(settings, quick=args.quick),
        "distributed": lambda: distributed.run(settings),
        "cpu-tax": lambda: cpu_tax.run(settings),
        "debug": lambda: debug_modes.run(settings),
        "profiler": lambda: profiler.run(settings),
        "cpu-time": lambda: cpu_time.run(settings),
        "graphs": lambda: graphs.run(settings),
        "ipc": lambda: ipc.run(settings),
    }
    return runners[name]()


def medians_ratio(figure: Figure) -> str:
    """openreg median over peer median (bandwidth: peer time over openreg time)."""
    if not figure.openreg or not figure.peer:
        return "-"
    return f"{figure.openreg / figure.peer:.3f}{TIMES}"


def table(figures: list[Figure]) -> str:
    header = (
        "family",
        "figure",
        "openreg",
        "peer",
        "medians ratio",
        "measured",
        "target",
        "status",
    )
    rows = [
        (
            f.family,
            f.name,
            format_side(f, f.openreg),
            format_side(f, f.peer),
            medians_ratio(f),
            format_measured(f),
            format_target(f),
            f.status + (f" ({f.note})" if f.note else ""),
        )
        for f in figures
    ]
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]

    def line(cells: tuple[str, ...]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    separator = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), separator, *(line(r) for r in rows)])


BUSY_SHARE_OF_CORES = 0.25  # other processes using more than this share of the cores skew ratios


def warn_if_busy(machine: dict[str, Any]) -> None:
    """Say so when other processes compete for the cores: every ratio here assumes they don't."""
    busy, cores = machine["busy_cores_before_run"], machine["usable_cores"]
    if busy is not None and busy > BUSY_SHARE_OF_CORES * cores:
        print(
            f"warning: other processes kept {busy:.2f} of {cores} cores busy just before the "
            "run; they share the CPU with both sides unevenly, so ratios will be noisy. Re-run "
            "on an idle machine for figures worth comparing.",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings = settings_from(args)
    started = now()
    if args.mode != "suite":
        import_torch(args.mode)
        from benchmarks import ops

        figures = ops.run(settings, OPS_FAMILY[args.mode], args.mode)
        payload = {"started_at": started, "finished_at": now(), "figures": figures}
        args.output.write_text(json.dumps(payload, default=lambda f: f.as_dict()))
        return 0

    os.environ.pop("OPENREG_FALLBACK", None)  # family 1 measures the default mode
    import_torch("inplace")
    machine = machine_info()
    print(
        f"OpenReg benchmarks: {machine['cpu_count']} cores "
        f"({machine['usable_cores']} usable), {machine['busy_cores_before_run']} busy before "
        f"the run (load average {machine['load_average'][0]:.2f}), "
        f"torch {machine['torch_version']} ({machine['torch_threads']} threads), "
        f"{settings.repeats} repeats per figure",
        flush=True,
    )
    warn_if_busy(machine)
    jiffies_at_start = cpu_jiffies()
    figures: list[Figure] = []
    timings: dict[str, dict[str, Any]] = {}
    for name in args.families:
        print(f"[{now()}] {name} ...", flush=True)
        begin, clock = now(), time.perf_counter()
        produced = family_runner(name, args, settings)
        figures += produced
        timings[name] = {
            "started_at": begin,
            "finished_at": now(),
            "seconds": round(time.perf_counter() - clock, 2),
            "figures": len(produced),
        }
    rendered = table(figures)
    statuses = [f.status for f in figures]
    summary = {s: statuses.count(s) for s in ("met", "MISSED", "n/a", "info")}
    print()
    print(rendered)
    steal = steal_share(jiffies_at_start, cpu_jiffies())
    print(f"\n{summary['met']} met, {summary['MISSED']} missed, {summary['n/a']} not measured, "
          f"{summary['info']} for information; {machine['cpu_count']} cores")  # fmt: skip
    if steal is not None:
        print(f"the hypervisor gave {steal:.1%} of this machine's CPU time to other guests "
              "during the run")  # fmt: skip
    payload = {
        "started_at": started,
        "finished_at": now(),
        "machine": machine
        | {"load_average_at_end": list(os.getloadavg()), "steal_share_during_run": steal},
        "settings": {
            "repeats": settings.repeats,
            "min_batch_seconds": settings.min_batch_seconds,
            "ops_processes": args.processes,
        },
        "environment": {k: v for k, v in os.environ.items() if k.startswith(("OPENREG_", "OMP_"))},
        "families": timings,
        "summary": summary,
        "figures": [f.as_dict() for f in figures],
        "table": rendered,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"results written to {args.output}")
    write_chart(payload, args.output.with_suffix(".png"))
    return 0


def write_chart(payload: dict[str, Any], output: Path) -> None:
    """The PNG of every figure against its target (benchmarks/chart.py), next to the JSON."""
    from benchmarks import chart

    try:
        drawn = chart.render(payload, output)
    except ValueError as error:  # e.g. only figures without targets were measured
        print(f"no chart: {error}")
        return
    print(f"chart of {len(drawn)} figures written to {output}")


if __name__ == "__main__":
    sys.exit(main())
