"""PyTorch's OpInfo database, run on openreg and compared with CPU.

For every OpInfo in ``torch.testing._internal.common_methods_invocations.op_db``
that supports float32 on CPU (plus extra dtypes, see ``EXTRA_DTYPES``, for a
subset of elementwise, reduction, indexing and bitwise ops), the first
``SAMPLES_PER_OP`` samples of ``op.sample_inputs("cpu", dtype)`` run on CPU and
on openreg and the outputs are compared; for ops that support ``out=``, the
first ``SAMPLES_PER_OUT`` float32 samples also run with zero-element out
tensors, which must be resized, filled and returned. ``_opinfo_worker.py``
documents the protocol:

* every tensor in input/args/kwargs is moved to openreg keeping its strides,
  storage offset and aliasing, so non-contiguous samples stay non-contiguous;
  CPU device arguments (``device="cpu"``) become openreg;
* both runs start from the same seed (``torch.manual_seed`` also seeds
  openreg, whose random ops run the CPU kernels on a CPU engine), so random
  ops are compared exactly too; an op is treated as nondeterministic (only
  structure, shapes and dtypes compared) when two seeded CPU runs disagree,
  or when its name is in ``_opinfo_worker.ALWAYS_NONDETERMINISTIC``
  (``empty`` and friends, whose values are whatever memory held);
* tolerances are ``torch.testing.assert_close``'s defaults for the dtype
  (OpInfo keeps its tolerances in per-test decorators, not on the OpInfo),
  NaNs compare equal; non-tensor outputs must be equal;
* every tensor the openreg run returns must be on the openreg device;
* samples that fail on CPU itself (``cpu_error``) are not counted.

Limits, to keep this module at about one minute on the 2-core machine (the
full database, every sample, takes about two): ``SAMPLES_PER_OP`` = 20 samples
per (op, dtype) and ``SAMPLES_PER_OUT`` = 5 for out=; ``SAMPLE_TIMEOUT``
seconds without progress count as a hang; after ``MAX_RESTARTS`` crashes or
hangs the sweep stops (the remaining samples are not run, so the pass count,
and with it the test, falls short). The sweep has no wall-clock budget: how
many samples run must not depend on how busy the machine is, or the floor
would fail by chance on a loaded one.

The samples run in a worker process (which also keeps the global side
effects of importing PyTorch's test suite out of this process); after a
sample crashes or hangs it is recorded as a failure, the rest of that
(op, dtype) as not run, and a new worker continues with the next one. The
module makes ONE assertion: the number of passing (op, sample) pairs is at
least ``FLOOR`` (the measured count rounded down to a multiple of 50; raise it
when the backend improves, never lower it). The summary (counts, the ops
treated as nondeterministic, and the top failing ops with their first error)
is printed (visible with ``-s``), attached with ``record_property`` and
written to pytest's terminal summary. ``python test_opinfo.py [results.json]``
runs the sweep without pytest.
"""

from __future__ import annotations

import collections
import json
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

FLOOR = 8700
SAMPLES_PER_OP = 20
SAMPLES_PER_OUT = 5
SAMPLE_TIMEOUT = 60.0
STARTUP_TIMEOUT = 180.0
MAX_RESTARTS = 25
TOP_FAILURES = 40
WORKER = Path(__file__).with_name("_opinfo_worker.py")

# A subset of ops also run with these dtypes (integer, low precision, complex).
_ELEMENTWISE = [
    "add",
    "sub",
    "mul",
    "div",
    "abs",
    "neg",
    "exp",
    "sin",
    "where",
    "maximum",
    "minimum",
    "eq",
    "lt",
    "clamp",
    "sum",
    "prod",
    "cumsum",
    "argmax",
    "sort",
    "cat",
    "stack",
    "index_select",
    "gather",
    "masked_fill",
    "matmul",
]
EXTRA_DTYPES = {
    **{name: ["int64", "float16", "bfloat16", "complex64"] for name in _ELEMENTWISE},
    **{name: ["int32", "uint8", "bool"] for name in ["bitwise_and", "bitwise_or", "bitwise_xor"]},
    **{name: ["bool"] for name in ["logical_and", "logical_or", "logical_not", "any", "all"]},
}


class _Worker:
    """One worker process; yields its JSON records, then None if it falls silent for longer
    than the timeout (the first record, after the imports, may take `first_timeout`)."""

    def __init__(self, config: dict, stderr_path: Path) -> None:
        self._stderr = stderr_path.open("w")
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER), json.dumps(config)],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            cwd=str(WORKER.parent),
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def records(self, first_timeout: float, timeout: float):
        waited = False
        while True:
            try:
                line = self._lines.get(timeout=timeout if waited else first_timeout)
            except queue.Empty:
                yield None
                return
            waited = True
            if line is None:
                return
            if line.startswith("{"):
                yield json.loads(line)

    def finish(self) -> int:
        if self.process.poll() is None:
            self.process.kill()
        code = self.process.wait()
        self._stderr.close()
        return code


def _stderr_tail(path: Path) -> str:
    """The last line the worker wrote to stderr that is not a warning or log line."""
    lines = [
        line
        for line in path.read_text(errors="replace").splitlines()
        if line.strip()
        and "Warning" not in line
        and not line.startswith(" ")
        and not re.match(r"[WIE]\d{4} ", line)
    ]
    return lines[-1][:300] if lines else ""


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def run_opinfo(max_restarts: int = MAX_RESTARTS) -> tuple[list[dict], list[str]]:
    """Runs every planned sample; after a crash or hang, restarts with the next (op, dtype).

    Returns the result records and notes about anything that cut the run short.
    """
    results: list[dict] = []
    notes: list[str] = []
    start = 0
    restarts = 0
    with tempfile.TemporaryDirectory() as scratch:
        stderr_path = Path(scratch) / "stderr.txt"
        while True:
            config = {
                "start": start,
                "samples_per_op": SAMPLES_PER_OP,
                "samples_per_out": SAMPLES_PER_OUT,
                "extra_dtypes": EXTRA_DTYPES,
            }
            worker = _Worker(config, stderr_path)
            current = op = None
            finished = hung = False
            for record in worker.records(STARTUP_TIMEOUT, SAMPLE_TIMEOUT):
                if record is None:
                    hung = True
                elif record["event"] == "op":
                    op = record
                elif record["event"] == "begin":
                    current = record
                elif record["event"] == "result":
                    results.append(record)
                    current = None
                elif record["event"] == "done":
                    finished = True
            code = worker.finish()
            if finished:
                return results, notes
            if current is None:
                raise AssertionError(
                    f"the OpInfo worker died outside a sample ({_describe_exit(code)}): "
                    f"{_stderr_tail(stderr_path)}"
                )
            if hung:
                reason = f"hung for {SAMPLE_TIMEOUT:.0f}s"
            else:
                tail = _stderr_tail(stderr_path)
                reason = f"crashed the worker ({_describe_exit(code)})" + (
                    f": {tail}" if tail else ""
                )
            notes.append(
                f"{current['name']}[{current['dtype']}] sample {current['sample']}: {reason}"
            )
            results.append({**current, "event": "result", "status": "fail", "error": reason})
            if op is not None and op["entry"] == current["entry"]:
                error = "not run: an earlier sample of this op crashed or hung"
                results += [
                    {**current, "event": "result", "sample": j, "status": "fail", "error": error}
                    for j in range(current["sample"] + 1, op["samples"])
                ]
            start = current["entry"] + 1
            restarts += 1
            if restarts >= max_restarts:
                notes.append(
                    f"stopped after {restarts} crashes or hangs: the remaining samples were not run"
                )
                return results, notes


def summarize(results: list[dict], seconds: float, notes: list[str] = ()) -> tuple[int, str]:
    """(pass count, printable summary) of the worker's result records."""
    counts = collections.Counter(record["status"] for record in results)
    failing: dict[str, list[str]] = collections.defaultdict(list)
    for record in results:
        if record["status"] == "fail":
            failing[f"{record['name']}[{record['dtype']}]"].append(record["error"])
    pairs = {(record["name"], record["dtype"]) for record in results}
    random = sorted({f"{r['name']}[{r['dtype']}]" for r in results if r["status"] == "random"})
    ranked = sorted(failing.items(), key=lambda item: (-len(item[1]), item[0]))
    lines = [
        f"OpInfo on openreg vs CPU: {len(pairs)} (op, dtype) pairs, {len(results)} samples "
        f"in {seconds:.0f}s",
        f"  pass {counts['pass']}  fail {counts['fail']}  "
        f"random (shape/dtype only) {counts['random']}  cpu_error {counts['cpu_error']}  "
        f"floor {FLOOR}",
        f"  nondeterministic on CPU (shape/dtype only): {', '.join(random) or '-'}",
        f"  failing (op, dtype) pairs: {len(failing)}; the top {min(len(ranked), TOP_FAILURES)}"
        " with their first error:",
    ]
    lines += [f"    {name}: {len(errors)} x {errors[0]}" for name, errors in ranked[:TOP_FAILURES]]
    return counts["pass"], "\n".join(lines)


class _TerminalSummary:
    """Plugin registered by the test: prints the summary in pytest's terminal summary."""

    def __init__(self, text: str) -> None:
        self.text = text

    def pytest_terminal_summary(self, terminalreporter) -> None:
        terminalreporter.section("openreg OpInfo summary")
        terminalreporter.write_line(self.text)


def test_opinfo_pass_count_at_least_floor(record_property, pytestconfig):
    began = time.monotonic()
    results, notes = run_opinfo()
    passed, summary = summarize(results, time.monotonic() - began, notes)
    print("\n" + summary)
    record_property("opinfo_pass", passed)
    record_property("opinfo_summary", summary)
    plugins = pytestconfig.pluginmanager
    if not plugins.has_plugin("openreg-opinfo-summary"):
        plugins.register(_TerminalSummary(summary), "openreg-opinfo-summary")
    assert passed >= FLOOR, f"{passed} OpInfo samples pass, fewer than FLOOR={FLOOR}\n{summary}"


if __name__ == "__main__":
    # Runs the sweep without pytest and prints the summary (for measuring FLOOR);
    # with a path argument, also writes every result record there as JSON.
    began = time.monotonic()
    records, notes = run_opinfo()
    print(summarize(records, time.monotonic() - began, notes)[1])
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(json.dumps(records, indent=0))
