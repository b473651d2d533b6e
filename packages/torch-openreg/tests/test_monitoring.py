"""torch.openreg.utilization and list_gpu_processes: torch.cuda's API over the process registry.

Each test runs its processes with a private registry directory (OPENREG_REGISTRY_DIR),
so processes of other test runs on the machine never appear.
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys

import pytest
import torch
from conftest import clean_environment

import openreg_runtime

MIB = 1024 * 1024
LINE = re.compile(r"^process +(\d+) uses +(\d+\.\d{3}) MB GPU memory$")


@pytest.fixture
def registry(tmp_path, monkeypatch):
    directory = tmp_path / "registry"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv("OPENREG_REGISTRY_DIR", str(directory))
    return directory


def test_signatures_mirror_torch_cuda():
    for name in ("utilization", "list_gpu_processes"):
        ours = inspect.signature(getattr(torch.openreg, name))
        cuda = inspect.signature(getattr(torch.cuda, name))
        assert list(ours.parameters) == list(cuda.parameters) == ["device"]
        assert ours.parameters["device"].default is None


@pytest.mark.child_interpreters
def test_list_gpu_processes_shows_this_and_other_processes(registry, run_python):
    # Another process using device 1 through the runtime alone.
    other = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, openreg_runtime as rt; b = rt.DeviceBuffer(3 * 2**20, device=1); "
         "print('ready', flush=True); sys.stdin.readline()"],
        env=clean_environment(OPENREG_REGISTRY_DIR=str(registry)),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert other.stdout.readline().strip() == "ready"
        result = run_python(
            """
            import json, os, torch, torch_openreg
            x = torch.ones(1000, 1000, device="openreg:1")
            print(json.dumps([os.getpid(), torch.openreg.memory_reserved(1),
                              torch.openreg.list_gpu_processes(1),
                              torch.openreg.list_gpu_processes("openreg:0")]))
            """,
            OPENREG_REGISTRY_DIR=str(registry),
        )
    finally:
        other.communicate("exit\n", timeout=60)
    assert result.returncode == 0, result.stderr
    pid, reserved, device1, device0 = json.loads(result.stdout.splitlines()[-1])
    lines = device1.splitlines()
    assert lines[0] == "GPU:1"
    rows = {int(m[1]): float(m[2]) for m in (LINE.match(line) for line in lines[1:])}
    assert rows == {other.pid: 3.0, pid: round(reserved / MIB, 3)}, device1
    assert [int(LINE.match(line)[1]) for line in lines[1:]] == sorted(rows)
    # Device 0: only this process may have activated it, with no memory allocated.
    assert device0.splitlines()[0] == "GPU:0"
    idle_line = f"process {pid:>10d} uses {0:>12.3f} MB GPU memory"
    assert device0.splitlines()[1:] in (["no processes are running"], [idle_line])


def test_list_gpu_processes_without_processes(registry):
    assert openreg_runtime.process_usage() == []
    assert torch.openreg.list_gpu_processes(1) == "GPU:1\nno processes are running"


@pytest.mark.child_interpreters
def test_utilization_follows_work_on_the_device(registry, run_python):
    window = openreg_runtime.UTILIZATION_WINDOW_MS / 1000
    result = run_python(
        f"""
        import json, threading, time, torch, torch_openreg, openreg_runtime
        # A kernel that blocks device 1 until released (on a stream of the runtime
        # torch uses: the process's device 1 is busy, as with any torch kernel).
        running, release = threading.Event(), threading.Event()
        stream = openreg_runtime.Stream(device=1)
        stream.launch(lambda: (running.set(), release.wait(120)))
        running.wait(60)
        x = torch.ones(4, device="openreg:0")  # device 0: used, but idle
        time.sleep({window} * 1.3)  # (longer under load changes nothing)
        busy = [torch.openreg.utilization(1), torch.openreg.utilization("openreg:0")]
        release.set()
        stream.synchronize()
        print(json.dumps(busy))
        """,
        timeout=120,
        OPENREG_REGISTRY_DIR=str(registry),
    )
    assert result.returncode == 0, result.stderr
    on_device1, on_device0 = json.loads(result.stdout.splitlines()[-1])
    assert on_device1 >= 90
    assert on_device0 == 0


@pytest.mark.child_interpreters
def test_utilization_drops_to_zero_after_a_window_without_work(registry, run_python):
    window = openreg_runtime.UTILIZATION_WINDOW_MS / 1000
    result = run_python(
        f"""
        import json, os, time, torch, torch_openreg, openreg_runtime
        torch.openreg.set_device(1)
        x = torch.randn(256, 256, device="openreg")
        for _ in range(20):
            x = x @ x / 256
        torch.openreg.synchronize()
        time.sleep({window} * 1.3)
        devices = [u.device for u in openreg_runtime.process_usage() if u.pid == os.getpid()]
        print(json.dumps([1 in devices, torch.openreg.utilization()]))
        """,
        OPENREG_REGISTRY_DIR=str(registry),
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == [True, 0]


@pytest.mark.parametrize("function", ["utilization", "list_gpu_processes"])
def test_invalid_devices_are_refused(function):
    with pytest.raises(RuntimeError, match="Invalid openreg device index 9"):
        getattr(torch.openreg, function)(9)
    with pytest.raises(ValueError, match="Expected an openreg device"):
        getattr(torch.openreg, function)("cpu")
