"""Checks that stream work is enqueued only through the engine's launch path.

Every piece of work the binding puts on an openreg stream — a kernel, a copy, a
fill, a compiled kernel, a collective, a custom operator — must go through
``engine/kernel_launch.cpp`` (``launchOnDevice``, ``runOnDevice``, ``copyOnStream``)
with a ``LaunchSpec``, which is where the race detector, the profiler and the sync
debug mode see it. A call that enqueues work directly would skip all three, so this
check refuses the runtime's enqueueing calls anywhere else in
``packages/torch-openreg/csrc/``, and the race detector's ``checkLaunch`` outside the
launch path, except in the places listed below with the reason each may. Run by
``nox -s lint``; exits non-zero naming each call.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

CSRC = Path(__file__).resolve().parents[1] / "packages" / "torch-openreg" / "csrc"

# Runtime calls that put work on a stream (or wait for it), and the detector's entry.
GUARDED = re.compile(
    r"\b(orLaunchHostFunc|launchHostFunc|orMemcpyAsync|orMemsetAsync|orMemcpy|orMemset|checkLaunch)\s*\("
)
LAUNCH_PATH = "engine/kernel_launch.cpp"
# file -> (calls it may make, why)
ALLOWED: dict[str, tuple[set[str], str]] = {
    LAUNCH_PATH: (
        {"orLaunchHostFunc", "launchHostFunc", "orMemcpyAsync", "checkLaunch"},
        "the launch path itself",
    ),
    "engine/race_detector.h": ({"checkLaunch"}, "declares it"),
    "engine/race_detector.cpp": ({"checkLaunch"}, "defines it"),
    "memory/block_pool.cpp": (
        {"orMemsetAsync"},
        "the allocator's poison fill of a block it hands out (OPENREG_DEBUG=poison): part "
        "of the allocation, on the block's stream, below the engine",
    ),
    "integration/device_allocator.cpp": (
        {"orMemcpy"},
        "c10::Allocator::copy_data, a synchronous copy of PyTorch's interface",
    ),
    "python/stream_hold.cpp": (
        {"launchHostFunc"},
        "the tests' stream hold: work that only blocks the worker until released",
    ),
}
COMMENT = re.compile(r"//.*?$|/\*.*?\*/", re.MULTILINE | re.DOTALL)


def violations(csrc: Path) -> list[str]:
    found: list[str] = []
    for source in sorted(csrc.rglob("*")):
        if source.suffix not in (".h", ".cpp"):
            continue
        relative = source.relative_to(csrc).as_posix()
        allowed, _ = ALLOWED.get(relative, (set(), ""))
        code = COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), source.read_text())
        for number, line in enumerate(code.splitlines(), start=1):
            for match in GUARDED.finditer(line):
                call = match.group(1)
                if call not in allowed:
                    found.append(
                        f"{relative}:{number}: {call}() outside the launch path; launch the work "
                        f"with a LaunchSpec through {LAUNCH_PATH} (launchOnDevice, runOnDevice, "
                        "copyOnStream)"
                    )
    return found


def main() -> int:
    problems = violations(CSRC)
    for problem in problems:
        print(problem)
    if not problems:
        print(f"stream work in {CSRC} is enqueued only through {LAUNCH_PATH}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
