"""``openreg-smi``: the OpenReg devices, their memory, the processes using them, how busy.

Like ``nvidia-smi``, for this user's processes: every process that activated an
OpenReg device publishes its counters in the process registry (see
``docs/device-registry.md``), and this tool reads them without becoming a user of
any device itself.

    openreg-smi              # a table
    openreg-smi --json       # one JSON document
    openreg-smi -l 2         # refresh every 2 seconds until Ctrl-C (with --json: one per line)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime
from typing import Any

import openreg_runtime as ort


def registry_directory() -> str:
    """Where the registry lives (``OPENREG_REGISTRY_DIR``, default ``/dev/shm/openreg-<uid>``)."""
    return os.environ.get("OPENREG_REGISTRY_DIR") or f"/dev/shm/openreg-{os.geteuid()}"


def snapshot() -> dict[str, Any]:
    """Devices, their memory and utilization, and their processes, as plain data."""
    usage = ort.process_usage()
    indices = sorted(set(range(ort.device_count())) | {u.device for u in usage})
    devices = []
    for index in indices:
        processes = [u for u in usage if u.device == index]
        if index < ort.device_count():
            capacity = ort.device_total_memory(index)
        else:  # a device only processes with a larger OPENREG_DEVICE_COUNT have
            capacity = max(u.capacity for u in processes)
        devices.append(
            {
                "index": index,
                "capacity": capacity,
                "memory_used": sum(u.bytes_in_use for u in processes),
                "utilization": min(100, sum(u.utilization for u in processes)),
                "processes": [
                    {
                        "pid": u.pid,
                        "name": u.name,
                        "memory_used": u.bytes_in_use,
                        "utilization": u.utilization,
                        "start_time": u.start_time,
                    }
                    for u in processes
                ],
            }
        )
    return {
        "time": datetime.now().astimezone().isoformat(timespec="seconds"),
        "registry": registry_directory(),
        "utilization_window_ms": ort.UTILIZATION_WINDOW_MS,
        "devices": devices,
    }


def format_bytes(count: int) -> str:
    """``1536`` -> ``1.50 KiB``: binary units, two decimals."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def printable(name: str) -> str:
    """``name`` with every control character as ``?``.

    A process chooses its own name (any bytes but NUL, via prctl or /proc/self/comm),
    and the table goes to a terminal: an escape sequence in a name must not reach it.
    """
    return "".join(c if c.isprintable() else "?" for c in name)


def render(state: dict[str, Any]) -> str:
    """The table ``openreg-smi`` prints."""
    window = state["utilization_window_ms"] / 1000
    lines = [
        f"openreg-smi  {state['time']}  (utilization: last {window:g} s; "
        f"this user's processes; registry {state['registry']})",
        "",
        f"{'device':>6}  {'memory used':>12} / {'total':<12}  {'util':>4}  processes",
    ]
    for device in state["devices"]:
        lines.append(
            f"{device['index']:>6}  {format_bytes(device['memory_used']):>12} / "
            f"{format_bytes(device['capacity']):<12}  {device['utilization']:>3}%  "
            f"{len(device['processes'])}"
        )
    lines += ["", f"{'device':>6}  {'pid':>8}  {'name':<16}  {'memory used':>12}  {'util':>4}"]
    rows = [(d["index"], p) for d in state["devices"] for p in d["processes"]]
    if not rows:
        lines.append(f"{'':>6}  no process is using an OpenReg device")
    for index, process in rows:
        lines.append(
            f"{index:>6}  {process['pid']:>8}  {printable(process['name']):<16}  "
            f"{format_bytes(process['memory_used']):>12}  {process['utilization']:>3}%"
        )
    return "\n".join(lines)


# A day, as for Stream.sleep: longer is no refresh, and time.sleep() raises
# OverflowError for values near 1e10 seconds and beyond.
MAX_INTERVAL_SECONDS = 86400


def refresh_interval(text: str) -> float:
    """``-l``'s argument: seconds, more than 0 and at most a day."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds <= MAX_INTERVAL_SECONDS:  # also false for NaN
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a refresh interval: give a number of seconds more than 0 and at "
            f"most {MAX_INTERVAL_SECONDS} (a day), e.g. -l 1"
        )
    return seconds


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="openreg-smi",
        description="Show the OpenReg devices: memory, utilization and the processes using them.",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "-l",
        "--loop",
        type=refresh_interval,
        metavar="SECONDS",
        help="refresh every SECONDS (more than 0, at most 86400) until interrupted "
        "(with --json: one document per line)",
    )
    return parser.parse_args(argv)


def report(as_json: bool) -> str:
    state = snapshot()
    return json.dumps(state) if as_json else render(state)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        while True:
            print(report(args.json), flush=True)
            if args.loop is None:
                return 0
            if not args.json:
                print(flush=True)
            time.sleep(args.loop)
    except ort.OpenRegError as error:
        print(f"openreg-smi: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:  # e.g. `openreg-smi -l 1 | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
