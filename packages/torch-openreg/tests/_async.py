"""Helpers shared by the asynchronous-execution tests.

A test of asynchronous behaviour needs work that is certainly still queued when
it looks. Work held behind a gate (``held_stream``) is; work behind a sleep is
not, because a busy machine can outlast any sleep. So tests hold streams and
release them when they are done looking, never count on durations.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

import torch_openreg
from torch_openreg._exit import in_untimed_wait

# How long a hold waits for its release at most: far longer than any test needs,
# so only a host that waits for held work (a bug) lets it expire. It then lets the
# stream go and fails that work, so the test fails with a message instead of hanging.
HOLD_LIMIT_S = 60.0
# release_soon polls whether the host thread is waiting at this interval.
_POLL_S = 0.002
# Where /proc cannot tell whether a thread waits, release_soon releases after this
# pause instead: a call that wrongly returns at once is then caught only on a
# machine quick enough, but a correct call still passes on any machine.
_UNKNOWN_WAIT_RELEASE_S = 0.1


def warm(*calls: Callable[[], object]) -> None:
    """Run each call once and wait, so later calls of the same signatures are asynchronous.

    The first call of a new operator signature runs synchronously (the plan cache
    confirms it on the CPU kernel's real results; see docs/async-execution.md).
    """
    for call in calls:
        call()
    for index in range(torch.openreg.device_count()):
        torch.openreg.synchronize(index)


class HeldStream:
    """A stream occupied by work that waits for ``release``.

    Everything queued on the stream after the hold stays queued until then,
    however slowly the host runs. The hold waits in C++, without the GIL (see
    ``csrc/python/stream_hold.cpp``).
    """

    def __init__(self, stream: torch.Stream) -> None:
        self.stream = stream
        self._hold = torch_openreg._C._StreamHold(
            stream.stream_id, stream.device_index, HOLD_LIMIT_S
        )
        self._releaser: threading.Thread | None = None

    @property
    def released(self) -> bool:
        """Whether the hold has been released (by ``release`` or ``release_soon``)."""
        return self._hold.released

    def release(self) -> None:
        """Let the stream run what is queued behind the hold."""
        self._hold.release()

    def release_soon(self, waiter: threading.Thread | None = None) -> None:
        """Release the hold once ``waiter`` (default: the calling thread) blocks.

        For a test that checks that a call waits for the held work: the call blocks
        the thread that makes it, which is when a helper thread releases the hold.
        Blocking is read from /proc (the thread sleeps in an untimed
        condition-variable wait, which is how the runtime's host waits sleep), so
        a call that returns without waiting finds the hold still in place:
        ``released`` is False when it returns.
        """
        if self._releaser is not None:
            raise RuntimeError("release_soon was already called for this hold")
        native_id = (waiter or threading.current_thread()).native_id
        assert native_id is not None, "the waiting thread must have started"
        self._releaser = threading.Thread(
            target=self._release_when_blocked, args=(native_id,), name="held-stream-releaser"
        )
        self._releaser.start()

    def wait_running(self) -> None:
        """Wait until the stream's worker has reached the hold (all work before it ran)."""
        assert self._hold.wait_running(HOLD_LIMIT_S), (
            f"the stream's worker did not reach the hold within {HOLD_LIMIT_S} s"
        )

    def close(self) -> None:
        """Release the hold and fail if it had expired (something waited for held work)."""
        self._hold.release()
        if self._releaser is not None:
            self._releaser.join()
        assert not self._hold.expired, (
            f"the hold on {self.stream} was not released within {HOLD_LIMIT_S} s: the host "
            "waited for work queued behind it (a call that should be asynchronous waited, or "
            "a wait held the GIL)"
        )

    def _release_when_blocked(self, native_id: int) -> None:
        started = time.monotonic()
        while not self._hold.released:
            state = in_untimed_wait(native_id)
            if state is None and time.monotonic() - started >= _UNKNOWN_WAIT_RELEASE_S:
                state = True
            if state:
                self._hold.release()
                return
            time.sleep(_POLL_S)


@contextmanager
def held_stream(stream: torch.Stream | None = None) -> Iterator[HeldStream]:
    """Hold ``stream`` (default: the current stream of the current device) for the block.

    ``with held_stream(s) as held:`` queues the hold on ``s``; what the block queues on
    ``s`` afterwards stays queued until ``held.release()`` (or ``held.release_soon()``)
    or the end of the block, which releases it. If the hold expired (the host waited
    for held work for ``HOLD_LIMIT_S``), leaving the block fails the test.
    """
    held = HeldStream(stream if stream is not None else torch.openreg.current_stream())
    try:
        yield held
    finally:
        held.close()
