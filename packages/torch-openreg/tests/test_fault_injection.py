"""Runtime fault injection (OPENREG_FAULT_*) seen from PyTorch, each in a fresh interpreter.

Each failure must surface as the right Python error, the device must keep working
afterwards, and the memory statistics must return to their baseline. The runtime
counts calls from the start of the process, so every script first checks that the
calls before the injected one are the ones it expects.
"""

from __future__ import annotations

import json

import pytest

# Every test runs its device work in fresh interpreters it starts (see the
# child_interpreters marker in pyproject.toml).
pytestmark = pytest.mark.child_interpreters

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


# PyTorch's copies that move bytes unchanged are runtime copies (orMemcpyAsync), counted by
# OPENREG_FAULT_MEMCPY; a copy that converts on the way is a kernel. The comments give the
# number of each runtime copy.
TENSOR_COPIES = (
    STATS
    + """
report = {}
def attempt(name, call, then=lambda: None):
    try:
        call()
        then()
    except RuntimeError as error:
        report[name] = f"{type(error).__name__}: {error}"
    else:
        report[name] = "no error"

host = torch.arange(64.0)
x = host.to("openreg")                                             # 1
baseline = stats()
attempt("to", lambda: host.to("openreg"))                          # 2: fails at the call
attempt("cpu", lambda: x.cpu())                                    # 3: fails at the call
attempt("item", lambda: x[5].item())                               # 4: fails at the call
y = torch.empty_like(x)
attempt("copy_", lambda: y.copy_(x), torch.openreg.synchronize)    # 5: at the synchronization
z = torch.empty(64, device="openreg:1")
# 6 fails; 7 (z.cpu(), on the destination's stream) reports it.
attempt("across_devices", lambda: z.copy_(x), lambda: z.cpu())
pinned = torch.arange(64.0).pin_memory()
attempt("pinned_non_blocking", lambda: y.copy_(pinned, non_blocking=True),
        torch.openreg.synchronize)                                 # 8
converted = host.to("openreg", torch.float64)                      # a kernel: not counted
attempt("after_converting", lambda: host.to("openreg"))            # 9
report["converted"] = converted.cpu().tolist() == host.double().tolist()  # 10
report["intact"] = x.cpu().tolist() == host.tolist()               # 11
del y, z, pinned, converted
torch.openreg.synchronize()
torch.openreg.empty_cache()
report["back"] = stats() == baseline
print(json.dumps(report))
"""
)


def test_failed_runtime_copy_of_each_tensor_copy_raises(run_python):
    result = run_python(TENSOR_COPIES, timeout=TIMEOUT, OPENREG_FAULT_MEMCPY="2,3,4,5,6,8,9")
    report = last_json(result)
    expected_calls = {
        "to": 2,
        "cpu": 3,
        "item": 4,
        "copy_": 5,
        "across_devices": 6,
        "pinned_non_blocking": 8,
        "after_converting": 9,
    }
    for name, call in expected_calls.items():
        message = report[name]
        assert message.startswith("RuntimeError: "), (name, message)
        assert f"orMemcpy call {call} failed by fault injection" in message, (name, message)
        assert "OPENREG_FAULT_MEMCPY" in message, (name, message)
        assert "nothing was copied" in message, (name, message)
    assert report["converted"] is True
    assert report["intact"] is True
    assert report["back"] is True


def test_converting_copies_are_kernels_counted_by_the_launch_faults(run_python):
    result = run_python(
        STATS
        + """
host = torch.arange(8, dtype=torch.int32)
report = {"same_dtype": host.to("openreg").cpu().tolist()}   # runtime copies: no launch
try:
    host.to("openreg", torch.float64)                         # launched work 1
except RuntimeError as error:
    report["converting"] = str(error)
report["strided"] = host[::2].to("openreg").cpu().tolist()    # a kernel too: launch 2, fine
print(json.dumps(report))
""",
        timeout=TIMEOUT,
        OPENREG_FAULT_LAUNCH="1",
    )
    report = last_json(result)
    assert report["same_dtype"] == list(range(8))
    assert "launched work 1 failed by fault injection" in report["converting"], report
    assert report["strided"] == [0, 2, 4, 6]


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
