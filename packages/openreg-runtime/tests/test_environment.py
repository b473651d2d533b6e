"""OPENREG_DEVICE_COUNT / OPENREG_DEVICE_MEMORY, each checked in a fresh process."""

import os

import pytest

MIB = 1 << 20
PAGE = os.sysconf("SC_PAGESIZE")

# Prints {"count": ..., "totals": [...]} or the error raised by the runtime.
PROBE = """
import json
import openreg_runtime as rt

def attempt(function):
    try:
        return {"value": function()}
    except Exception as error:
        return {"error": type(error).__name__, "message": str(error)}

report = {
    "count": attempt(rt.device_count),
    "count_again": attempt(rt.device_count),
    "allocate": attempt(lambda: rt.DeviceBuffer(16).nbytes),
}
if "value" in report["count"]:
    count = report["count"]["value"]
    report["totals"] = [rt.mem_get_info(device=i)[1] for i in range(count)]
    report["last_device"] = attempt(lambda: rt.DeviceBuffer(16, device=count - 1).device)
    report["past_last"] = attempt(lambda: rt.set_device(count))
print(json.dumps(report))
"""


@pytest.mark.parametrize("value", ["1", "4", "16", " 3 "])
def test_valid_device_count(run_python, value):
    report = run_python(PROBE, env={"OPENREG_DEVICE_COUNT": value}).json()
    count = int(value)
    assert report["count"] == {"value": count}
    assert report["last_device"] == {"value": count - 1}
    assert report["past_last"]["error"] == "InvalidDeviceError"
    expected = (
        "there is 1 OpenReg device (valid index: 0)"
        if count == 1
        else f"there are {count} OpenReg devices (valid indices: 0..{count - 1})"
    )
    assert expected in report["past_last"]["message"]
    assert len(report["totals"]) == count


@pytest.mark.parametrize("value", ["", "   "])
def test_empty_device_count_means_default(run_python, value):
    report = run_python(PROBE, env={"OPENREG_DEVICE_COUNT": value}).json()
    assert report["count"] == {"value": 2}


@pytest.mark.parametrize("value", ["0", "17", "abc", "-1", "2.5", "4x"])
def test_invalid_device_count(run_python, value):
    report = run_python(PROBE, env={"OPENREG_DEVICE_COUNT": value}).json()
    for call in ("count", "count_again", "allocate"):
        assert report[call]["error"] == "InitializationError", report
        message = report[call]["message"]
        assert f"OPENREG_DEVICE_COUNT='{value}' is invalid" in message
        assert "from 1 to 16" in message
        assert "[orErrorInitialization]" in message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("16MiB", 16 * MIB),
        ("64m", 64 * MIB),
        ("1GiB", 1 << 30),
        ("1048576", MIB),
        ("2MB", -(-2_000_000 // PAGE) * PAGE),  # rounded up to whole pages
        ("1.5MiB", 3 * MIB // 2),
    ],
)
def test_valid_device_memory(run_python, value, expected):
    report = run_python(PROBE, env={"OPENREG_DEVICE_MEMORY": value}).json()
    assert report["count"] == {"value": 2}
    assert report["totals"] == [expected, expected]


@pytest.mark.parametrize("value", ["lots", "0", "2TiB", "512KiB", "12XB", "-5MiB"])
def test_invalid_device_memory(run_python, value):
    report = run_python(PROBE, env={"OPENREG_DEVICE_MEMORY": value}).json()
    # The configuration is read as a whole: even the device count reports it.
    for call in ("count", "allocate"):
        assert report[call]["error"] == "InitializationError", report
        message = report[call]["message"]
        assert f"OPENREG_DEVICE_MEMORY='{value}' is invalid" in message
        assert "1MiB to 1TiB" in message


def test_environment_is_read_once_per_process(run_python):
    source = """
    import json, os
    import openreg_runtime as rt
    first = rt.device_count()
    os.environ["OPENREG_DEVICE_COUNT"] = "7"
    print(json.dumps([first, rt.device_count()]))
    """
    assert run_python(source, env={"OPENREG_DEVICE_COUNT": "3"}).json() == [3, 3]


@pytest.mark.parametrize("value", ["4096", "1000000", "1048575"])
def test_bare_number_device_memory_is_bytes(run_python, value):
    report = run_python(PROBE, env={"OPENREG_DEVICE_MEMORY": value}).json()
    message = report["count"]["message"]
    assert f"OPENREG_DEVICE_MEMORY='{value}' is invalid" in message
    assert f"a bare number is bytes: {value} bytes is below the 1MiB minimum" in message
    assert "'8GiB' or '512MiB'" in message


# The seed chaos scheduling runs with, read through the C API (the runtime's Python
# bindings leave chaos scheduling to the PyTorch binding).
SEED_PROBE = """
import ctypes, json
import openreg_runtime as rt

library = rt.load_library()
library.orGetLastErrorMessage.restype = ctypes.c_char_p
enabled, seed = ctypes.c_int(), ctypes.c_ulonglong()
status = library.orDebugGetChaos(ctypes.byref(enabled), ctypes.byref(seed))
message = library.orGetLastErrorMessage().decode() if status else ""
print(json.dumps([status, enabled.value, str(seed.value), message]))
"""

MAX_SEED = "18446744073709551615"


@pytest.mark.parametrize("value", ["1", "7", "007", MAX_SEED])
def test_valid_debug_seed(run_python, value):
    report = run_python(SEED_PROBE, env={"OPENREG_DEBUG": "chaos", "OPENREG_DEBUG_SEED": value})
    assert report.json() == [0, 1, str(int(value)), ""]


@pytest.mark.parametrize(
    "value",
    [" -5", "-5", "+5", " 5", "5 ", "0", "5x", "0x10", "1e3", "1_000", "\u0661",
     "18446744073709551616", "99999999999999999999999999"],
)  # fmt: skip
def test_invalid_debug_seed_names_the_variable_and_the_range(run_python, value):
    report = run_python(SEED_PROBE, env={"OPENREG_DEBUG": "chaos", "OPENREG_DEBUG_SEED": value})
    status, _, _, message = report.json()
    assert status == 3, message  # orErrorInitialization: never a silently different seed
    assert f"OPENREG_DEBUG_SEED='{value}' is invalid" in message
    assert f"from 1 to {MAX_SEED}" in message
    assert "unset it" in message
