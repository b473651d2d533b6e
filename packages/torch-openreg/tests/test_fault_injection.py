"""Runtime fault injection (OPENREG_FAULT_*) seen from PyTorch, each in a fresh interpreter.

Each failure must surface as the right Python error, the device must keep working
afterwards, and the memory statistics must return to their baseline. The runtime
counts calls from the start of the process, so every script first checks that the
calls before the injected one are the ones it expects.
"""

from __future__ import annotations

import json

MIB = 1 << 20

STATS = """
import json
import torch
import torch_openreg  # noqa: F401

def stats():
    s = torch.openreg.memory_stats()
    return {key: s.get(key, 0) for key in (
        "allocated_bytes.all.current", "active_bytes.all.current",
        "requested_bytes.all.current", "reserved_bytes.all.current", "allocation.all.current")}
"""


# Fresh interpreters import torch, which takes a minute on a loaded 2-core machine.
TIMEOUT = 900


def last_json(result) -> dict:
    assert result.returncode == 0, f"child failed ({result.returncode}):\n{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_failed_device_allocation_is_torch_out_of_memory(run_python):
    # Call 1 is the segment of `x`; calls 2 and 3 are the segment for `big` and the
    # caching allocator's retry after releasing its cache: both fail.
    result = run_python(
        STATS
        + """
x = torch.ones(1024, device="openreg")
torch.openreg.synchronize()
assert torch.openreg.memory_stats()["num_device_alloc"] == 1
baseline = stats()
report = {}
try:
    big = torch.empty(4 << 20, dtype=torch.uint8, device="openreg")
except torch.OutOfMemoryError as error:
    report["error"] = str(error)
report["after_failure"] = stats()
report["ooms"] = torch.openreg.memory_stats()["num_ooms"]
# The device keeps working: compute, and allocate what failed before (call 4).
report["sum"] = (x * 2).sum().item()
big = torch.full((4 << 20,), 3, dtype=torch.uint8, device="openreg")
report["big_sum"] = big.sum().item()
del big
torch.openreg.empty_cache()
report["after_release"] = stats()
report["baseline"] = baseline
print(json.dumps(report))
""",
        timeout=TIMEOUT,
        OPENREG_FAULT_MALLOC="2,3",
    )
    report = last_json(result)
    assert "openreg out of memory on device 0" in report["error"], report
    assert report["ooms"] == 1
    assert report["after_failure"] == report["baseline"]
    assert report["sum"] == 2048.0
    assert report["big_sum"] == 3 * (4 << 20)
    assert report["after_release"] == report["baseline"]


def test_a_single_failed_allocation_is_absorbed_by_the_retry(run_python):
    result = run_python(
        STATS
        + """
x = torch.ones(1024, device="openreg")
torch.openreg.synchronize()
baseline = stats()
big = torch.zeros(4 << 20, dtype=torch.uint8, device="openreg")   # call 2 fails, 3 succeeds
s = torch.openreg.memory_stats()
report = {"retries": s["num_alloc_retries"], "ooms": s["num_ooms"], "sum": big.sum().item()}
del big
torch.openreg.empty_cache()
report["back"] = stats() == baseline
print(json.dumps(report))
""",
        timeout=TIMEOUT,
        OPENREG_FAULT_MALLOC="2",
    )
    assert last_json(result) == {"retries": 1, "ooms": 0, "sum": 0, "back": True}


def test_failed_copy_surfaces_at_the_next_synchronization(run_python):
    # Growing a storage copies its old bytes with orMemcpyAsync: the process's first copy.
    result = run_python(
        STATS
        + """
baseline = stats()
t = torch.arange(16, dtype=torch.float32, device="openreg")
storage = t.untyped_storage()
storage.resize_(128)
report = {}
try:
    torch.openreg.synchronize()
except RuntimeError as error:
    report["error"] = str(error)
    report["type"] = type(error).__name__
# Reported once; the device keeps working, and a second resize copies correctly.
torch.openreg.synchronize()
u = torch.arange(16, dtype=torch.float32, device="openreg")
u.untyped_storage().resize_(128)
report["copied"] = u.cpu().tolist() == list(range(16))
del t, storage, u
torch.openreg.empty_cache()
report["back"] = stats() == baseline
print(json.dumps(report))
""",
        timeout=TIMEOUT,
        OPENREG_FAULT_MEMCPY="1",
    )
    report = last_json(result)
    assert report["type"] == "RuntimeError"
    assert "orMemcpy call 1 failed by fault injection" in report["error"], report
    assert "OPENREG_FAULT_MEMCPY" in report["error"]
    assert report["copied"] is True
    assert report["back"] is True


def test_failed_kernel_launch_surfaces_once_and_the_device_keeps_working(run_python):
    result = run_python(
        STATS
        + """
x = torch.arange(1000, dtype=torch.float32, device="openreg")
torch.openreg.synchronize()
baseline = stats()
errors, values = [], []
for step in range(30):
    try:
        y = (x * step + 1).sum()
        values.append(y.item())
    except RuntimeError as error:
        errors.append(str(error))
        torch.openreg.synchronize()   # reported once: nothing left afterwards
    del y
print(json.dumps({
    "errors": errors,
    "last_values_right": values[-5:] == [float(sum(i * s + 1 for i in range(1000)))
                                         for s in range(25, 30)],
    "back": stats() == baseline,
}))
""",
        timeout=TIMEOUT,
        OPENREG_FAULT_LAUNCH="12",
    )
    report = last_json(result)
    (error,) = report["errors"]
    assert "launched work 12 failed by fault injection" in error, error
    assert "OPENREG_FAULT_LAUNCH" in error
    assert report["last_values_right"] is True
    assert report["back"] is True


def test_invalid_fault_variable_names_itself(run_python):
    result = run_python(
        """
import torch
import torch_openreg  # noqa: F401
try:
    torch.ones(1, device="openreg")
except RuntimeError as error:
    print(str(error))
""",
        timeout=TIMEOUT,
        OPENREG_FAULT_MALLOC="first",
    )
    assert result.returncode == 0, result.stderr
    assert "OPENREG_FAULT_MALLOC='first' is invalid" in result.stdout
    assert "call numbers counted from 1" in result.stdout
