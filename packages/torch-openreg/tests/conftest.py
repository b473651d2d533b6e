"""Shared fixtures for the torch-openreg test suite.

Importing ``torch_openreg`` registers the ``openreg`` device. The runtime reads
OPENREG_DEVICE_COUNT / OPENREG_DEVICE_MEMORY once per process, so in-process
tests run with both unset (two devices, a quarter of physical RAM each);
anything that needs another environment, or that crashes on purpose, runs in a
fresh interpreter through ``run_python``.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator

import pytest

# Must happen before the runtime first reads the environment (first device use).
for _variable in ("OPENREG_DEVICE_COUNT", "OPENREG_DEVICE_MEMORY"):
    os.environ.pop(_variable, None)

import torch  # noqa: E402

import torch_openreg  # noqa: E402, F401


@pytest.fixture
def devices() -> int:
    """Number of openreg devices (2 unless the environment says otherwise)."""
    return torch.openreg.device_count()


@pytest.fixture(autouse=True)
def _reset_openreg_device() -> Iterator[None]:
    """After each test: wait for all device work, put the default streams back as the
    thread's current streams, and make device 0 current again."""
    yield
    for index in range(torch.openreg.device_count()):
        torch.openreg.synchronize(index)
        torch.openreg.set_stream(torch.openreg.default_stream(index))
    torch.openreg.set_device(0)


@pytest.fixture
def steady_memory_stats() -> Iterator[None]:
    """Device memory statistics that change only through the test's own tensors.

    A test that catches an exception leaves its tensors in a reference cycle (the
    traceback holds its frames), and Python's cyclic collector frees them whenever it
    next runs, which depends on thread timing. Collected first and kept off here, they
    cannot change a statistic in the middle of a test that compares exact figures.
    """
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture
def races_off() -> Iterator[None]:
    """Race detection off for a test that races on purpose (nox -s checked turns it on)."""
    debug = torch.openreg.debug
    modes = debug.get_modes()
    debug.disable("races")
    yield
    debug.set_modes(*modes)


def clean_environment(**overrides: str) -> dict[str, str]:
    """os.environ without OpenReg variables or Python fault handlers, plus ``overrides``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("OPENREG_") and key not in ("PYTHONFAULTHANDLER", "PYTHONDEVMODE")
    }
    env.update(overrides)
    return env


@pytest.fixture
def run_python() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``code`` (dedented) in a fresh interpreter; keyword arguments become
    environment variables. Returns the CompletedProcess (text stdout/stderr)."""

    def run(code: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            env=clean_environment(**env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    return run
