"""Helpers shared by the asynchronous-execution tests."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

import openreg_runtime

# How long a held stream waits for its release at most: far longer than any test
# needs, so only a host that waited for the held work (a bug) lets it expire.
HOLD_LIMIT_S = 120.0


def warm(*calls: Callable[[], object]) -> None:
    """Run each call once and wait, so later calls of the same signatures are asynchronous.

    The first call of a new operator signature runs synchronously (the plan cache
    confirms it on the CPU kernel's real results; see docs/async-execution.md).
    """
    for call in calls:
        call()
    for index in range(torch.openreg.device_count()):
        torch.openreg.synchronize(index)


@contextmanager
def held_default_stream(device: int = 0) -> Iterator[None]:
    """Keep ``device``'s default stream busy until the block ends.

    Work queued on that stream inside the block stays queued, however slowly the host
    runs, so a test can check that a call returned without waiting for its work: no
    sleep has to be long enough. The hold is work queued through the runtime on the
    same stream (the binding's default stream is the runtime's).
    """
    release = threading.Event()
    with openreg_runtime.device(device):
        openreg_runtime.Stream.default().launch(lambda: release.wait(HOLD_LIMIT_S))
    try:
        yield
    finally:
        release.set()
