"""What the threads of this process are doing, read from /proc (Linux).

Used at exit, to wait for PyTorch's autograd device threads to go idle before
the interpreter finalizes (see ``_registration._drain_devices``), and by the
tests, to know that a host thread is blocked waiting for the device.

A thread is *waiting* when it sleeps in an untimed condition-variable wait:
that is how an idle autograd device thread waits for its next task and how the
runtime's host waits sleep. CPython's GIL waits are timed and mutex waits use
another futex operation, so neither counts as waiting.
"""

from __future__ import annotations

import os
import time

_TASKS = "/proc/self/task"
_FUTEX_SYSCALL = {"x86_64": 202, "aarch64": 98}.get(os.uname().machine)
_FUTEX_WAIT_BITSET = 9  # pthread_cond_wait's operation; mutexes use FUTEX_WAIT (0)
_FUTEX_COMMAND_MASK = 0x7F  # without the PRIVATE and CLOCK_REALTIME flags

# PyTorch's autograd engine names each device thread "pt_autograd_<device>".
AUTOGRAD_THREAD_PREFIX = "pt_autograd_"


def in_untimed_wait(native_id: int) -> bool | None:
    """Whether thread ``native_id`` of this process sleeps in an untimed condition wait.

    None when /proc cannot tell (another OS or architecture, or the thread has gone).
    A thread on a CPU, or blocked outside a system call, is not waiting (False).
    """
    try:
        with open(f"{_TASKS}/{native_id}/syscall") as status:
            fields = status.read().split()
    except OSError:
        return None
    if _FUTEX_SYSCALL is None or not fields:
        return None
    if fields[0] in ("running", "-1"):
        return False
    if not fields[0].isdigit() or len(fields) < 5:
        return None
    if int(fields[0]) != _FUTEX_SYSCALL:
        return False
    operation, timeout = int(fields[2], 16), int(fields[4], 16)
    return operation & _FUTEX_COMMAND_MASK == _FUTEX_WAIT_BITSET and timeout == 0


def threads_named(prefix: str) -> list[int]:
    """Native ids of this process's threads whose name starts with ``prefix`` ([] if unknown)."""
    try:
        tasks = os.listdir(_TASKS)
    except OSError:
        return []
    found = []
    for task in tasks:
        try:
            with open(f"{_TASKS}/{task}/comm") as comm:
                name = comm.read().strip()
        except OSError:
            continue  # the thread has exited meanwhile
        if name.startswith(prefix):
            found.append(int(task))
    return found


def wait_until_idle(native_ids: list[int], limit_s: float, poll_s: float = 0.001) -> bool:
    """Wait until none of the threads is busy, looking again every ``poll_s``.

    A thread that waits, has gone, or that /proc cannot read is not busy. The
    GIL is released between looks, so a busy thread that needs it can finish.
    True when none was busy any more; False when ``limit_s`` passed first.
    """
    deadline = time.monotonic() + limit_s
    while any(in_untimed_wait(native_id) is False for native_id in native_ids):
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
    return True
