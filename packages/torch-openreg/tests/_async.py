"""Helpers shared by the asynchronous-execution tests."""

from __future__ import annotations

from collections.abc import Callable

import torch


def warm(*calls: Callable[[], object]) -> None:
    """Run each call once and wait, so later calls of the same signatures are asynchronous.

    The first call of a new operator signature runs synchronously (the plan cache
    confirms it on the CPU kernel's real results; see docs/async-execution.md).
    """
    for call in calls:
        call()
    for index in range(torch.openreg.device_count()):
        torch.openreg.synchronize(index)
