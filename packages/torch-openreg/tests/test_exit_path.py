"""The exit path's wait for threads (torch_openreg/_exit.py) where /proc can and
cannot tell what a thread is doing: never a hang, never a skipped grace.

The exit handler's other steps are tested where their subjects are: autograd
device threads in test_autograd.py, errors pending at exit in
test_async_execution.py, background threads of distributed in test_distributed.py.
"""

from __future__ import annotations

import threading
import time

import pytest

from torch_openreg import _exit


def test_a_thread_in_an_untimed_wait_is_idle_and_a_running_one_busy() -> None:
    if _exit.in_untimed_wait(threading.get_native_id()) is None:
        pytest.fail(f"/proc cannot tell thread states on {_exit.os.uname().machine}")
    waiting = threading.Event()
    started = threading.Event()
    ids: list[int] = []

    def sleeper() -> None:
        ids.append(threading.get_native_id())
        started.set()
        waiting.wait()  # untimed: idle

    thread = threading.Thread(target=sleeper)
    thread.start()
    started.wait()
    try:
        assert _exit.wait_until_idle(ids, limit_s=60.0)
        # The calling thread is running: busy, so a short limit passes first.
        assert not _exit.wait_until_idle([threading.get_native_id()], limit_s=0.01)
    finally:
        waiting.set()
        thread.join()


def test_a_thread_that_has_gone_is_idle() -> None:
    ids: list[int] = []
    thread = threading.Thread(target=lambda: ids.append(threading.get_native_id()))
    thread.start()
    thread.join()
    assert _exit.wait_until_idle(ids, limit_s=60.0)


def test_where_proc_cannot_tell_the_wait_is_a_bounded_pause(monkeypatch) -> None:
    """On an architecture whose futex number is unknown every live thread's state is
    unknown: the wait pauses for the short grace, not for the whole limit, and says
    it did not see the threads idle."""
    monkeypatch.setattr(_exit, "_FUTEX_SYSCALL", None)
    me = threading.get_native_id()
    assert _exit.in_untimed_wait(me) is None
    start = time.monotonic()
    assert not _exit.wait_until_idle([me], limit_s=600.0, unknown_pause_s=0.05)
    assert time.monotonic() - start < 300.0  # the pause, not the 600 s limit


@pytest.mark.child_interpreters
def test_exit_on_an_architecture_proc_cannot_read_neither_hangs_nor_aborts(run_python) -> None:
    """A stand-in autograd device thread busy for ever, on an "unknown architecture":
    the exit handler pauses briefly and the process exits normally."""
    result = run_python(
        """
        import ctypes, threading, time
        import torch
        import torch_openreg
        from torch_openreg import _exit
        _exit._FUTEX_SYSCALL = None
        def busy_forever():
            ctypes.CDLL(None).prctl(15, b"pt_autograd_7")  # PR_SET_NAME
            named.set()
            while True:
                time.sleep(0.01)
        named = threading.Event()
        threading.Thread(target=busy_forever, daemon=True).start()
        named.wait()
        torch.ones(2, device="openreg").add_(1)
        print("exiting", flush=True)
        """,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "exiting"
