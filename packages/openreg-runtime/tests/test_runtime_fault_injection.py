"""OPENREG_FAULT_MALLOC / OPENREG_FAULT_MEMCPY / OPENREG_FAULT_LAUNCH, each in a fresh process.

The variables list call numbers (counted from 1 in the process) that fail
with the error a real failure of that call produces; every other call, and
the device, keep working.
"""

import pytest

FAULT_VARIABLES = ["OPENREG_FAULT_MALLOC", "OPENREG_FAULT_MEMCPY", "OPENREG_FAULT_LAUNCH"]

COMMON = """
import ctypes, json
import openreg_runtime as rt

K = rt.MemcpyKind

def attempt(function):
    try:
        value = function()
        return {"value": value if isinstance(value, (int, bool, str, type(None))) else "ok"}
    except rt.OpenRegError as error:
        return {"error": type(error).__name__, "message": str(error)}
"""


def test_malloc_faults_fail_exactly_the_listed_calls(run_python):
    source = (
        COMMON
        + """
report = {"info_before": rt.mem_get_info()}
pointers, outcomes = [], []
for call in range(1, 7):
    if call == 3:
        assert rt.malloc(0) == 0   # allocates nothing: not counted
    outcome = attempt(lambda: pointers.append(rt.malloc(8192)))
    outcomes.append(outcome)
report["outcomes"] = outcomes
report["buffer"] = attempt(lambda: rt.DeviceBuffer(100).nbytes)    # call 7: fails
report["buffer_again"] = attempt(lambda: rt.DeviceBuffer(100).nbytes)
report["memory_error"] = isinstance(rt.OutOfMemoryError("x"), MemoryError)
report["live"] = len(pointers)
report["info_during"] = rt.mem_get_info()
for pointer in pointers:
    rt.free(pointer)
report["info_after"] = rt.mem_get_info()
print(json.dumps(report))
"""
    )
    report = run_python(source, env={"OPENREG_FAULT_MALLOC": "2, 5,7"}).json()
    failed = [call for call, outcome in enumerate(report["outcomes"], 1) if "error" in outcome]
    assert failed == [2, 5]
    for call in failed:
        outcome = report["outcomes"][call - 1]
        assert outcome["error"] == "OutOfMemoryError"
        assert f"orMalloc call {call} failed by fault injection" in outcome["message"]
        assert "OPENREG_FAULT_MALLOC" in outcome["message"]
        assert outcome["message"].endswith("[orErrorOutOfMemory]")
    assert report["buffer"]["error"] == "OutOfMemoryError"
    assert report["buffer_again"] == {"value": 100}
    assert report["memory_error"] is True
    assert report["live"] == 4
    total = report["info_before"][1]
    assert report["info_during"] == [total - 4 * 8192, total]
    assert report["info_after"] == report["info_before"]


def test_memcpy_faults_fail_the_copy_and_nothing_else(run_python):
    source = (
        COMMON
        + """
size = 4096
device = rt.DeviceBuffer(size)
pinned = rt.HostBuffer(size)
stream = rt.Stream()
memoryview(pinned)[:] = b"\\x11" * size
report = {}
report["1 sync h2d"] = attempt(lambda: device.copy_from(pinned))            # ok
memoryview(pinned)[:] = b"\\x22" * size
report["2 sync h2d"] = attempt(lambda: device.copy_from(pinned))            # fails
report["device after 2"] = device.to_bytes(0, 1).hex()                       # call 3
report["4 async"] = attempt(lambda: rt.memcpy_async(
    device.ptr, pinned.ptr, size, K.HOST_TO_DEVICE, stream))                 # fails later
report["sync after 4"] = attempt(stream.synchronize)
report["sync again"] = attempt(stream.synchronize)
report["device after 4"] = device.to_bytes(0, 1).hex()                       # call 5
report["6 async"] = attempt(lambda: rt.memcpy_async(
    device.ptr, pinned.ptr, size, K.HOST_TO_DEVICE, stream))
report["sync after 6"] = attempt(stream.synchronize)
report["device after 6"] = device.to_bytes(0, 1).hex()
print(json.dumps(report))
"""
    )
    report = run_python(source, env={"OPENREG_FAULT_MEMCPY": "2,4"}).json()
    assert report["1 sync h2d"] == {"value": None}
    assert report["2 sync h2d"]["error"] == "LaunchFailureError"
    assert "orMemcpy call 2 failed by fault injection" in report["2 sync h2d"]["message"]
    assert "OPENREG_FAULT_MEMCPY" in report["2 sync h2d"]["message"]
    assert report["device after 2"] == "11", "a failed copy must not write anything"
    # Asynchronous: accepted, then reported by the next synchronizing call, once.
    assert report["4 async"] == {"value": None}
    assert report["sync after 4"]["error"] == "LaunchFailureError"
    assert "orMemcpy call 4 failed by fault injection" in report["sync after 4"]["message"]
    assert report["sync again"] == {"value": None}
    assert report["device after 4"] == "11"
    assert report["6 async"] == {"value": None}
    assert report["sync after 6"] == {"value": None}
    assert report["device after 6"] == "22"


def test_launch_faults_fail_the_listed_work(run_python):
    source = (
        COMMON
        + """
stream = rt.Stream()
ran = []
for index in range(1, 5):
    stream.launch(lambda index=index: ran.append(index))
report = {"first_sync": attempt(stream.synchronize)}
stream.launch(lambda: ran.append(5))
report["second_sync"] = attempt(stream.synchronize)
report["ran"] = ran
print(json.dumps(report))
"""
    )
    report = run_python(source, env={"OPENREG_FAULT_LAUNCH": "3"}).json()
    first = report["first_sync"]
    assert first["error"] == "LaunchFailureError"
    assert (
        "launched work 3 failed by fault injection (listed in OPENREG_FAULT_LAUNCH)"
        in (first["message"])
    )
    assert first["message"].endswith("[orErrorLaunchFailure]")
    assert report["second_sync"] == {"value": None}
    # The failing work still ran (its function owns resources it must release).
    assert report["ran"] == [1, 2, 3, 4, 5]


def test_without_the_variables_nothing_fails(run_python):
    source = (
        COMMON
        + """
stream = rt.Stream()
buffers = [rt.DeviceBuffer(4096) for _ in range(50)]
for buffer in buffers:
    buffer.copy_from(bytes(4096), stream=stream)
    stream.launch(lambda: None)
stream.synchronize()
print(json.dumps("ok"))
"""
    )
    assert run_python(source).json() == "ok"


@pytest.mark.parametrize("variable", FAULT_VARIABLES)
@pytest.mark.parametrize("value", ["0", "-1", "abc", "1,,2", "1.5", "2;3", "9" * 23])
def test_invalid_fault_lists_are_initialization_errors(run_python, variable, value):
    source = (
        COMMON
        + """
print(json.dumps([attempt(rt.device_count), attempt(lambda: rt.malloc(16))]))
"""
    )
    for outcome in run_python(source, env={variable: value}).json():
        assert outcome["error"] == "InitializationError", outcome
        message = outcome["message"]
        assert f"{variable}='{value}' is invalid" in message
        assert "call numbers counted from 1" in message


@pytest.mark.parametrize("variable", FAULT_VARIABLES)
def test_empty_fault_list_means_no_fault(run_python, variable):
    source = (
        COMMON
        + """
print(json.dumps(attempt(lambda: rt.free(rt.malloc(16)))))
"""
    )
    assert run_python(source, env={variable: " "}).json() == {"value": None}
