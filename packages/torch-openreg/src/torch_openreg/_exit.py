"""The binding's exit path: what runs between the end of a program and Python's finalization.

One handler, registered with ``atexit`` (so it runs before the interpreter
finalizes), in this order (docs/exit-path.md says why each step is there):

1. wait, bounded, until PyTorch's autograd device threads are idle: they let go
   of a finished backward's graph task (which holds Python objects) just after
   the backward has returned;
2. end graph captures still underway, discarding what they recorded (noted on
   stderr; the exit status is left alone);
3. synchronize every device used, so queued kernels finish while PyTorch's
   process-wide state is whole, collecting errors nobody synchronized for;
4. close the binding's background threads to Python (``_C._close_for_python_exit``,
   ``csrc/base/python_exit.h``): from then on they keep what they would let go;
5. report each pending error on stderr and make the exit status 1.

Whether a thread is idle is read from /proc (its current system call). Where
/proc cannot tell (another OS, or an architecture whose futex system call
number is not known here), the wait degrades to a short bounded pause: it can
neither hang nor skip the grace an idle thread needs.
"""

from __future__ import annotations

import atexit
import os
import sys
import time

from . import _C, openreg

_TASKS = "/proc/self/task"
# The futex system call's number on the architectures whose numbers are known
# here (x86_64's own table; the generic table's, shared by arm64, riscv64 and
# loongarch64).
_FUTEX_SYSCALL = {"x86_64": 202, "aarch64": 98, "riscv64": 98, "loongarch64": 98}.get(
    os.uname().machine
)
_FUTEX_WAIT_BITSET = 9  # pthread_cond_wait's operation; mutexes use FUTEX_WAIT (0)
_FUTEX_COMMAND_MASK = 0x7F  # without the PRIVATE and CLOCK_REALTIME flags

# PyTorch's autograd engine names each device thread "pt_autograd_<device>".
AUTOGRAD_THREAD_PREFIX = "pt_autograd_"
# How long exit waits at most for a busy autograd device thread (one still
# running a backward started by a daemon thread, say); PyTorch's engine gives
# its device threads as long to stop.
AUTOGRAD_IDLE_LIMIT_S = 10.0
# Where /proc cannot tell whether a thread is idle: how long exit pauses for
# the threads instead. Letting go of a graph task takes microseconds; this
# leaves a busy machine's scheduler ample room.
UNKNOWN_STATE_PAUSE_S = 0.2


def install() -> None:
    """Register the exit handler (once per process, by ``_registration.register``)."""
    atexit.register(drain_devices)


def drain_devices() -> None:
    """Let device work finish, and threads let go of Python, before the interpreter tears down."""
    pending: list[str] = []
    try:
        _wait_for_autograd_threads()
        # A program that never used a device has nothing queued (and, with an
        # invalid OPENREG_DEVICE_COUNT, must not be warned about it at exit).
        if openreg.is_initialized():
            _abandon_graph_captures()
            pending = _synchronize_collecting_errors()
    finally:
        _C._close_for_python_exit()
    if pending:
        _report_on_stderr(pending)
        _C._exit_with_failure_status()


def _abandon_graph_captures() -> None:
    # Captured work is only recorded: nothing is lost, but synchronizing a device
    # while a capture is underway is an error of the capture, not of queued work.
    notes = [
        f"openreg: note: a graph capture begun on stream {stream_id} of openreg:{device} was "
        "still underway at exit; what it recorded was discarded (end a capture with "
        "capture_end(), or capture inside `with torch.openreg.graph(g):`)"
        for device, stream_id in _C._abandon_graph_captures()
    ]
    if notes:
        _report_on_stderr(notes)


def _synchronize_collecting_errors() -> list[str]:
    pending = []
    for index in range(_C._device_count()):
        try:
            _C._synchronize(index)
        except RuntimeError as error:
            message = " ".join(str(error).split())  # one line, whatever the error's layout
            pending.append(
                f"openreg: an error of work queued on openreg:{index} was still pending at "
                f"exit, with nothing synchronizing after it: {message}"
            )
    return pending


def _report_on_stderr(lines: list[str]) -> None:
    text = "".join(f"{line}\n" for line in lines)
    if sys.stderr is not None:
        sys.stderr.write(text)
        sys.stderr.flush()
    else:  # pythonw, or a program that closed it: the file descriptor is still there
        os.write(2, text.encode(errors="replace"))


def _wait_for_autograd_threads() -> None:
    wait_until_idle(threads_named(AUTOGRAD_THREAD_PREFIX), AUTOGRAD_IDLE_LIMIT_S)


# ---- What the threads of this process are doing (/proc) ----------------------
# A thread is *waiting* when it sleeps in an untimed condition-variable wait:
# that is how an idle autograd device thread waits for its next task and how the
# runtime's host waits sleep. CPython's GIL waits are timed and mutex waits use
# another futex operation, so neither counts. The tests use this too, to know
# that a host thread is blocked waiting for the device.


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


def wait_until_idle(
    native_ids: list[int],
    limit_s: float,
    poll_s: float = 0.001,
    unknown_pause_s: float | None = None,
) -> bool:
    """Wait until none of the threads is busy, looking again every ``poll_s``.

    A thread that waits or has gone is not busy. One whose state /proc cannot
    tell is waited for ``unknown_pause_s`` (default ``UNKNOWN_STATE_PAUSE_S``),
    never longer than ``limit_s``. The GIL is released between looks, so a busy
    thread that needs it can finish. True when every thread was seen idle;
    False when a limit passed first.
    """
    pause = UNKNOWN_STATE_PAUSE_S if unknown_pause_s is None else unknown_pause_s
    start = time.monotonic()
    while True:
        states = [_is_busy(native_id) for native_id in native_ids]
        if not any(state is not False for state in states):
            return True
        limit = limit_s if True in states else min(pause, limit_s)
        if time.monotonic() - start >= limit:
            return False
        time.sleep(poll_s)


def _is_busy(native_id: int) -> bool | None:
    """True if the thread is busy, False if it waits or has gone, None if /proc cannot tell."""
    waiting = in_untimed_wait(native_id)
    if waiting is None:
        return None if os.path.exists(f"{_TASKS}/{native_id}") else False
    return not waiting
