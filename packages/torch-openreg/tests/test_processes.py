"""openreg across processes: forked children and torch.multiprocessing, as with CUDA.

* A child forked after the parent used a device cannot use it (the runtime
  refuses); like ``torch.cuda``, ``torch.openreg.init()`` and torch's lazy
  initialisation on the first device call raise "Cannot re-initialize openreg in
  forked subprocess ... 'spawn' start method" (``torch_openreg/openreg/_fork.py``).
* Such a child can neither receive openreg tensors (the rebuild raises in its
  ``get()``, naming spawn and forkserver) nor send its parent's
  (``torch_openreg/_multiprocessing.py``); sharing with spawned processes is
  tested in ``test_ipc.py``.

Every scenario runs in a fresh interpreter (forking the test process, with its
stream worker threads, would test pytest rather than openreg), and every wait
on another process has a deadline.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

BAD_FORK = (
    "Cannot re-initialize openreg in forked subprocess. To use openreg with multiprocessing, "
    "you must use the 'spawn' start method"
)

# Runs CHILD_BODY in a child forked with os.fork; the child reports on stdout.
FORK_TEMPLATE = """
import os, sys, torch, torch_openreg
USE_DEVICE_FIRST
sys.stdout.flush()
pid = os.fork()
if pid == 0:
    def attempt(name, call):
        try:
            result = call()
        except RuntimeError as error:
            print(name, "raised:", error, flush=True)
        else:
            print(name, "returned:", result, flush=True)
    CHILD_BODY
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("child status", status, flush=True)
"""

CHILD_CALLS = """
    attempt("is_in_bad_fork", torch.openreg._is_in_bad_fork)
    attempt("is_initialized", torch.openreg.is_initialized)
    attempt("init", torch.openreg.init)
    attempt("factory", lambda: torch.ones(2, device="openreg").sum().item())
    attempt("to", lambda: torch.ones(2).to("openreg").sum().item())
    attempt("manual_seed", lambda: type(torch.manual_seed(0)).__name__)
"""


def run_fork(run_python, use_device_first: bool, body: str = CHILD_CALLS) -> dict[str, str]:
    code = FORK_TEMPLATE.replace(
        "USE_DEVICE_FIRST",
        "torch.ones(1, device='openreg').sum().item()" if use_device_first else "",
    ).replace("    CHILD_BODY", body)
    result = run_python(code, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "child status 0" in result.stdout, result.stdout + result.stderr
    lines = [
        line for line in result.stdout.splitlines() if " raised: " in line or " returned: " in line
    ]
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in lines}


@pytest.mark.child_interpreters
def test_child_forked_after_device_use_cannot_initialise(run_python) -> None:
    report = run_fork(run_python, use_device_first=True)
    assert report["is_in_bad_fork"] == "returned: True"
    assert report["is_initialized"] == "returned: False"
    for call in ("init", "factory", "to"):
        assert report[call] == f"raised: {BAD_FORK}", (call, report[call])
    # torch.manual_seed seeds every device that is not in a bad fork: it skips openreg.
    assert report["manual_seed"] == "returned: Generator"


# Calls that read or change a device's state (its streams, events, memory and
# allocator, the current device) work on state copied from the parent, which the
# child cannot use: each raises as initialisation does.
DEVICE_STATE_CALLS = """
    m = torch.openreg
    attempt("Stream", m.Stream)
    attempt("Stream_on_1", lambda: m.Stream(device=1, priority=-1))
    attempt("Event", m.Event)
    attempt("memory_allocated", m.memory_allocated)
    attempt("memory_allocated_1", lambda: m.memory_allocated(1))
    attempt("max_memory_allocated", m.max_memory_allocated)
    attempt("memory_reserved", m.memory_reserved)
    attempt("memory_stats", m.memory_stats)
    attempt("reset_peak_memory_stats", m.reset_peak_memory_stats)
    attempt("get_per_process_memory_fraction", m.get_per_process_memory_fraction)
    attempt("memory_snapshot", m.memory_snapshot)
    attempt("empty_cache", m.empty_cache)
    attempt("MemPool", m.MemPool)
    attempt("current_device", m.current_device)
    attempt("set_device", lambda: m.set_device(1))
    attempt("device_context", lambda: m.device(1).__enter__())
    attempt("get_device_name", m.get_device_name)
    attempt("synchronize", m.synchronize)
    attempt("stream_context", lambda: m.stream(torch.Stream(device="openreg:0")).__enter__())
    attempt("caching_allocator_alloc", lambda: m.caching_allocator_alloc(16))
    attempt("caching_allocator_delete", lambda: m.caching_allocator_delete(0))
    attempt("record_memory_history", m.memory._record_memory_history)
    attempt("get_device_properties", m.get_device_properties)
    attempt("get_device_capability", m.get_device_capability)
    # What describes the installation rather than a device still answers, as torch.cuda's.
    attempt("device_count", m.device_count)
    attempt("is_available", m.is_available)
    attempt("get_sync_debug_mode", m.get_sync_debug_mode)
"""


@pytest.mark.child_interpreters
def test_child_forked_after_device_use_refuses_device_state_calls(run_python) -> None:
    report = run_fork(run_python, use_device_first=True, body=DEVICE_STATE_CALLS)
    answering = {"device_count": "returned: 2", "is_available": "returned: True"}
    answering["get_sync_debug_mode"] = "returned: 0"
    for call, outcome in report.items():
        expected = answering.get(call, f"raised: {BAD_FORK}")
        assert outcome == expected, (call, outcome)
    assert len(report) == 27, report


@pytest.mark.child_interpreters
def test_child_forked_before_any_device_use_can_make_streams_and_read_memory(run_python) -> None:
    body = """
    attempt("Stream", lambda: type(torch.openreg.Stream()).__name__)
    attempt("memory_allocated", lambda: torch.openreg.memory_allocated())
"""
    report = run_fork(run_python, use_device_first=False, body=body)
    assert report == {"Stream": "returned: Stream", "memory_allocated": "returned: 0"}


def test_error_is_cudas_with_openreg_name() -> None:
    import torch.cuda

    # torch.cuda's message, from its source (adjacent string literals joined).
    source = re.sub(r'"\s*\n\s*"', "", Path(torch.cuda.__file__).read_text())
    assert BAD_FORK.replace("openreg", "CUDA") in source


@pytest.mark.child_interpreters
def test_child_forked_before_any_device_use_can_use_the_device(run_python) -> None:
    report = run_fork(run_python, use_device_first=False)
    assert report["is_in_bad_fork"] == "returned: False"
    assert report["init"] == "returned: None"
    assert report["factory"] == "returned: 2.0"
    assert report["to"] == "returned: 2.0"


@pytest.mark.child_interpreters
def test_grandchild_of_a_bad_fork_is_in_a_bad_fork_too(run_python) -> None:
    body = """
    pid = os.fork()
    if pid == 0:
        attempt("grandchild_bad_fork", torch.openreg._is_in_bad_fork)
        attempt("grandchild_init", torch.openreg.init)
        os._exit(0)
    os.waitpid(pid, 0)
"""
    report = run_fork(run_python, use_device_first=True, body=body)
    assert report["grandchild_bad_fork"] == "returned: True"
    assert report["grandchild_init"] == f"raised: {BAD_FORK}"


MULTIPROCESSING_FORK = """
import multiprocessing as mp, torch, torch_openreg

def child(queue):
    try:
        torch.zeros(1, device="openreg")
    except RuntimeError as error:
        queue.put(str(error))
    else:
        queue.put("no error")

if __name__ == "__main__":
    torch.ones(1, device="openreg").sum().item()
    context = mp.get_context(METHOD)
    queue = context.Queue()
    process = context.Process(target=child, args=(queue,))
    process.start()
    print(queue.get(timeout=120), flush=True)
    process.join(timeout=120)
    print("exit", process.exitcode, flush=True)
"""


@pytest.mark.child_interpreters
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_multiprocessing_start_methods(run_python, tmp_path, method: str) -> None:
    # spawn needs an importable __main__: run the script from a file.
    script = tmp_path / "start_method.py"
    script.write_text(MULTIPROCESSING_FORK.replace("METHOD", repr(method)))
    result = run_python(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')")
    assert result.returncode == 0, result.stderr
    first, last = result.stdout.strip().splitlines()[-2:]
    assert last == "exit 0"
    assert first == (BAD_FORK if method == "fork" else "no error")


# ---- Sending tensors and forked processes ------------------------------------------------
# Sharing itself (spawn, forkserver) is tested in test_ipc.py; here what fork cannot do.

FORKED_RECEIVER = """
import multiprocessing as mp, torch, torch_openreg

def receiver(queue, report):
    try:
        received = queue.get(timeout=120)
    except RuntimeError as error:
        report.send("receiver raised: " + str(error))
    else:
        report.send("receiver got " + str(received))

if __name__ == "__main__":
    torch.ones(1, device="openreg").sum().item()
    context = mp.get_context("fork")
    queue = context.Queue()
    here, there = context.Pipe()
    process = context.Process(target=receiver, args=(queue, there))
    process.start()
    queue.put(torch.arange(3.0, device="openreg"))
    print(here.recv() if here.poll(120) else "nothing reported", flush=True)
    process.join(timeout=120)
    print("exit", process.exitcode, flush=True)
"""


@pytest.mark.child_interpreters
def test_a_forked_receiver_raises_instead_of_waiting(run_python, tmp_path) -> None:
    script = tmp_path / "forked_receiver.py"
    script.write_text(FORKED_RECEIVER)
    result = run_python(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[-2].startswith("receiver raised: Cannot receive an openreg tensor in a process ")
    assert "'spawn' or 'forkserver'" in lines[-2]
    assert lines[-1] == "exit 0"


@pytest.mark.child_interpreters
def test_a_forked_child_cannot_send_the_parents_tensors(run_python) -> None:
    body = """
    from multiprocessing.reduction import ForkingPickler
    attempt("send", lambda: ForkingPickler.dumps(parent_tensor))
"""
    code = FORK_TEMPLATE.replace(
        "USE_DEVICE_FIRST", "parent_tensor = torch.ones(2, device='openreg'); parent_tensor.sum()"
    ).replace("    CHILD_BODY", body)
    result = run_python(code, timeout=120)
    assert result.returncode == 0, result.stderr
    assert (
        "send raised: Cannot send an openreg tensor from a process forked after openreg was used"
        in result.stdout
    )
