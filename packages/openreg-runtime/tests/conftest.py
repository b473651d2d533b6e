"""Shared fixtures for the openreg-runtime test suite.

The runtime reads OPENREG_DEVICE_COUNT / OPENREG_DEVICE_MEMORY once per
process, so the in-process tests run with both unset (the defaults: two
devices, a quarter of physical RAM each). Everything that depends on the
environment, on signals or on fork() runs in a fresh interpreter through the
``run_python`` fixture.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable

import pytest

# Must happen before the runtime first reads the environment (first device use).
for _variable in ("OPENREG_DEVICE_COUNT", "OPENREG_DEVICE_MEMORY"):
    os.environ.pop(_variable, None)

import openreg_runtime as rt  # noqa: E402

PAGE = os.sysconf("SC_PAGESIZE")


def _page_round(size: int) -> int:
    return (size + PAGE - 1) // PAGE * PAGE


@pytest.fixture
def page_round():
    """Bytes the runtime reserves for a device allocation of ``size`` bytes."""
    return _page_round


def clean_environment(**overrides: str) -> dict[str, str]:
    """os.environ without OpenReg variables or Python fault handlers, plus overrides."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("OPENREG_") and key not in ("PYTHONFAULTHANDLER", "PYTHONDEVMODE")
    }
    env.update(overrides)
    return env


@pytest.fixture(scope="session")
def clean_env():
    """Factory: the environment without OPENREG_* variables, plus overrides."""
    return clean_environment


class PythonResult:
    """Outcome of a child interpreter run by ``run_python``."""

    def __init__(self, completed: subprocess.CompletedProcess[str]) -> None:
        self.returncode = completed.returncode
        self.stdout = completed.stdout
        self.stderr = completed.stderr

    def json(self):
        """The JSON document printed on the last line of stdout."""
        assert self.returncode == 0, f"child failed ({self.returncode}):\n{self.stderr}"
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        assert lines, f"child printed nothing; stderr:\n{self.stderr}"
        return json.loads(lines[-1])


@pytest.fixture(scope="session")
def run_python():
    """Run Python source in a fresh interpreter (plain, no faulthandler).

    ``env`` entries are added to a copy of the environment from which every
    OPENREG_* variable has been removed.
    """

    def run(source: str, env: dict[str, str] | None = None, timeout: float = 60) -> PythonResult:
        completed = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(source)],
            env=clean_environment(**(env or {})),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return PythonResult(completed)

    return run


@pytest.fixture(autouse=True)
def _isolate_runtime_state():
    """Every test starts and ends on device 0 with all devices idle."""
    rt.set_device(0)
    yield
    rt.set_device(0)
    for index in range(rt.device_count()):
        rt.synchronize(device=index)


@pytest.fixture
def device_count() -> int:
    count = rt.device_count()
    assert count >= 2, "the in-process tests need the default of two devices"
    return count


@pytest.fixture
def lib() -> ctypes.CDLL:
    """libopenreg.so through ctypes, for C-level checks (return codes, last error)."""
    library = rt.load_library()
    library.orGetErrorName.restype = ctypes.c_char_p
    library.orGetErrorName.argtypes = [ctypes.c_int]
    library.orGetLastErrorMessage.restype = ctypes.c_char_p
    library.orGetLastErrorMessage.argtypes = []
    library.orGetLastError.restype = ctypes.c_int
    library.orPeekAtLastError.restype = ctypes.c_int
    library.orMemcpy.restype = ctypes.c_int
    library.orMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return library


def _address_of(buffer) -> int:
    if isinstance(buffer, ctypes.Array | ctypes.Structure):
        return ctypes.addressof(buffer)
    view = memoryview(buffer)
    return ctypes.addressof((ctypes.c_char * view.nbytes).from_buffer(view))


@pytest.fixture
def address_of():
    """Address of a writable host buffer (bytearray, array, ctypes object, ...)."""
    return _address_of


@pytest.fixture
def device_memory():
    """Factory for raw device allocations that are freed after the test."""
    live: list[int] = []

    def allocate(size: int, device: int | None = None) -> int:
        pointer = rt.malloc(size, device=device)
        live.append(pointer)
        return pointer

    yield allocate
    for pointer in live:
        try:
            rt.free(pointer)
        except rt.InvalidDevicePointerError:
            pass  # the test freed it itself


@pytest.fixture
def pinned_memory():
    """Factory for raw pinned host allocations that are freed after the test."""
    live: list[int] = []

    def allocate(size: int) -> int:
        pointer = rt.malloc_host(size)
        live.append(pointer)
        return pointer

    yield allocate
    for pointer in live:
        try:
            rt.free_host(pointer)
        except rt.InvalidHostPointerError:
            pass  # the test freed it itself


def hold(stream: rt.Stream) -> Callable[[], None]:
    """Block ``stream``'s worker inside a callback until the returned function is called.

    Returns once the worker is inside the callback, so everything enqueued
    afterwards is certainly still queued: tests that need "work is pending"
    use this instead of a sleep, which a busy machine can outlast.
    """
    running, release = threading.Event(), threading.Event()

    def blocker() -> None:
        running.set()
        if not release.wait(60):
            raise TimeoutError("a held stream was never released")

    stream.launch(blocker)
    assert running.wait(60), "the stream's worker never started the blocking callback"
    return release.set


@pytest.fixture
def hold_stream():
    """Factory: ``release = hold_stream(stream)`` (see ``hold``); released after the test."""
    releases: list[Callable[[], None]] = []

    def start(stream: rt.Stream) -> Callable[[], None]:
        release = hold(stream)
        releases.append(release)
        return release

    yield start
    for release in releases:
        release()


_FUTEX_SYSCALL = {"x86_64": 202, "aarch64": 98}.get(os.uname().machine)
_FUTEX_WAIT_BITSET = 9  # what pthread_cond_wait uses; mutexes use FUTEX_WAIT (0)


def _in_untimed_condition_wait(native_id: int) -> bool | None:
    """Whether the thread sleeps in an untimed condition-variable wait (None: cannot tell)."""
    try:
        with open(f"/proc/self/task/{native_id}/syscall") as status:
            return _untimed_condition_wait_in(status.read())
    except OSError:
        return None


def _untimed_condition_wait_in(syscall: str) -> bool | None:
    """Reads /proc/<pid>/task/<tid>/syscall: the system call a thread is blocked in and
    its arguments, ``-1 <sp> <pc>`` when blocked outside one, ``running`` while it runs.
    The last two mean "not waiting yet", not "cannot tell": a thread that is still on
    its way to the wait (more likely the busier the machine) must be waited for."""
    fields = syscall.split()
    if _FUTEX_SYSCALL is None or not fields:
        return None
    if fields[0] in ("running", "-1"):
        return False
    if not fields[0].isdigit() or len(fields) < 5:
        return None
    if int(fields[0]) != _FUTEX_SYSCALL:
        return False
    operation, timeout = int(fields[2], 16), int(fields[4], 16)
    return operation & 0x7F == _FUTEX_WAIT_BITSET and timeout == 0


def _wait_until_blocked(thread: threading.Thread, timeout: float = 60) -> bool:
    """Wait until ``thread`` sleeps in an untimed condition-variable wait.

    Lets a test know, rather than hope after a sleep, that a host thread has
    reached a blocking wait inside the runtime (CPython's GIL waits are timed,
    mutex waits use another futex operation, so neither is mistaken for it).
    Returns False where /proc cannot tell (then the caller must not rely on it).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = _in_untimed_condition_wait(thread.native_id)
        if state is None:
            return False
        if state:
            return True
        time.sleep(0.005)
    raise AssertionError(f"{thread.name} never blocked within {timeout} s")


@pytest.fixture(scope="session")
def wait_until_blocked():
    """``wait_until_blocked(thread)``: see ``_wait_until_blocked``."""
    return _wait_until_blocked
