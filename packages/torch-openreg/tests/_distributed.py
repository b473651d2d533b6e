"""Running one torch.distributed "world" of fresh processes for a test.

``run_world(case, world_size)`` starts ``world_size`` interpreters running
``_distributed_cases.py CASE``; each is one rank. The rendezvous store is a
TCPStore served by the test process itself on a port the OS picks, so no port
is guessed and nothing can collide with another test or another run; Gloo's
own sockets use OS-chosen ports too. Each rank runs in its own session: a rank
still alive when the world's time is up, or long after another rank failed, is
killed with its whole process group, so no test leaves processes behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch.distributed as dist

CASES = Path(__file__).with_name("_distributed_cases.py")
# After one rank has failed, how long the others get to notice (their own
# collective timeouts are shorter) before they are killed.
GRACE_AFTER_FAILURE = 30.0


@dataclass
class RankResult:
    rank: int
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return (
            f"--- rank {self.rank} exited with {self.returncode}\n"
            f"stdout:\n{self.stdout[-4000:]}\nstderr:\n{self.stderr[-6000:]}"
        )


class WorldFailed(AssertionError):
    pass


# The debug modes (OPENREG_DEBUG, OPENREG_DEBUG_RACES, OPENREG_DEBUG_SEED) reach the
# ranks: a suite run with them on (nox -s checked) checks the ranks' work too.
DEBUG_PREFIX = "OPENREG_DEBUG"


def clean_environment(**overrides: str) -> dict[str, str]:
    """os.environ without OpenReg variables (but the debug modes) or Python fault
    handlers, plus ``overrides``.

    (As conftest.clean_environment; not imported from there, because another test
    directory's conftest may be the one Python finds under that name.)
    """
    env = {
        key: value
        for key, value in os.environ.items()
        if (key.startswith(DEBUG_PREFIX) or not key.startswith("OPENREG_"))
        and key not in ("PYTHONFAULTHANDLER", "PYTHONDEVMODE")
    }
    env.update(overrides)
    return env


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait()


def run_world(
    case: str,
    world_size: int,
    *args: str,
    timeout: float = 180.0,
    env: dict[str, str] | None = None,
    expect_success: bool = True,
) -> list[RankResult]:
    """Run ``case`` on ``world_size`` ranks; returns each rank's result.

    With ``expect_success`` (the default) any rank failing raises WorldFailed
    with every rank's output.
    """
    store = dist.TCPStore(
        "127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False,
        timeout=timedelta(seconds=timeout),
    )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="openreg-world-") as scratch:
        outputs = []
        processes = []
        try:
            for rank in range(world_size):
                out = open(Path(scratch) / f"{rank}.out", "w+b")
                err = open(Path(scratch) / f"{rank}.err", "w+b")
                outputs.append((out, err))
                rank_env = clean_environment(
                    RANK=str(rank),
                    LOCAL_RANK=str(rank),
                    WORLD_SIZE=str(world_size),
                    MASTER_ADDR="127.0.0.1",
                    MASTER_PORT=str(store.port),
                    **(env or {}),
                )
                processes.append(
                    subprocess.Popen(
                        [sys.executable, str(CASES), case, *args],
                        env=rank_env,
                        stdout=out,
                        stderr=err,
                        start_new_session=True,
                    )
                )
            _wait_all(processes, timeout)
        finally:
            for process in processes:
                _kill(process)
        results = []
        for rank, ((out, err), process) in enumerate(zip(outputs, processes, strict=True)):
            out.seek(0)
            err.seek(0)
            results.append(
                RankResult(
                    rank,
                    process.returncode,
                    out.read().decode(errors="replace"),
                    err.read().decode(errors="replace"),
                )
            )
            out.close()
            err.close()
    del store
    if expect_success and any(r.returncode != 0 for r in results):
        raise WorldFailed(
            f"case {case!r} failed on {world_size} ranks:\n"
            + "\n".join(r.describe() for r in results)
        )
    return results


def _wait_all(processes: list[subprocess.Popen[bytes]], timeout: float) -> None:
    """Wait for every rank; stop early once a rank failed and the grace period is over."""
    deadline = time.monotonic() + timeout
    failed_at: float | None = None
    while True:
        codes = [p.poll() for p in processes]
        if all(code is not None for code in codes):
            return
        now = time.monotonic()
        if failed_at is None and any(code not in (None, 0) for code in codes):
            failed_at = now
        if now > deadline or (failed_at is not None and now > failed_at + GRACE_AFTER_FAILURE):
            return  # the caller kills what is left; its return code tells
        time.sleep(0.05)
