"""Device capacity (OPENREG_DEVICE_MEMORY) and OutOfMemoryError, in fresh processes."""

import pytest

MIB = 1 << 20

OOM_SCENARIO = """
import json
import openreg_runtime as rt

report = {"info_start": rt.mem_get_info()}
first = rt.DeviceBuffer(8 << 20)
report["info_after_first"] = rt.mem_get_info()
try:
    rt.DeviceBuffer(16 << 20)
except rt.OutOfMemoryError as error:
    report["error"] = {
        "message": str(error),
        "is_memory_error": isinstance(error, MemoryError),
        "code": error.code,
    }
report["info_after_failure"] = rt.mem_get_info()
report["other_device"] = rt.DeviceBuffer(16 << 20, device=1).nbytes  # device 1 is independent
second = rt.DeviceBuffer(8 << 20)  # fills device 0 exactly
report["info_full"] = rt.mem_get_info()
try:
    rt.malloc(1)
except MemoryError as error:
    report["raw_error"] = str(error)
first.free()
second.free()
with rt.DeviceBuffer(16 << 20) as whole:
    whole.fill(0x42)
    report["whole"] = whole.to_bytes((16 << 20) - 2).hex()
report["info_end"] = rt.mem_get_info()
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def oom_report(run_python):
    return run_python(OOM_SCENARIO, env={"OPENREG_DEVICE_MEMORY": "16MiB"}).json()


def test_capacity_comes_from_the_environment(oom_report):
    assert oom_report["info_start"] == [16 * MIB, 16 * MIB]
    assert oom_report["info_after_first"] == [8 * MIB, 16 * MIB]


def test_allocation_beyond_capacity_raises_out_of_memory(oom_report):
    error = oom_report["error"]
    assert error["is_memory_error"] is True
    assert error["code"] == 2
    message = error["message"]
    assert message.startswith("out of memory on OpenReg device 0:")
    assert f"tried to allocate {16 * MIB} bytes" in message
    assert f"with {8 * MIB} of {16 * MIB} bytes in use" in message
    assert "OPENREG_DEVICE_MEMORY" in message
    assert message.endswith("[orErrorOutOfMemory]")


def test_failed_allocation_reserves_nothing(oom_report):
    assert oom_report["info_after_failure"] == [8 * MIB, 16 * MIB]


def test_devices_have_separate_capacity(oom_report):
    assert oom_report["other_device"] == 16 * MIB


def test_full_device_rejects_even_one_byte(oom_report):
    assert oom_report["info_full"] == [0, 16 * MIB]
    assert "tried to allocate 1 bytes" in oom_report["raw_error"]
    assert "[orErrorOutOfMemory]" in oom_report["raw_error"]


def test_runtime_remains_usable_after_out_of_memory(oom_report):
    assert oom_report["whole"] == "4242"
    assert oom_report["info_end"] == [16 * MIB, 16 * MIB]


def test_fragmented_memory_reports_contiguity(run_python):
    source = """
    import json
    import openreg_runtime as rt
    blocks = [rt.DeviceBuffer(4 << 20) for _ in range(4)]
    blocks[0].free()
    blocks[2].free()
    try:
        rt.DeviceBuffer(8 << 20)
    except rt.OutOfMemoryError as error:
        message = str(error)
    else:
        message = None
    blocks[1].free()
    with rt.DeviceBuffer(12 << 20):
        pass
    print(json.dumps({"message": message, "info": rt.mem_get_info()}))
    """
    report = run_python(source, env={"OPENREG_DEVICE_MEMORY": "16MiB"}).json()
    assert report["message"] is not None, "8 MiB fit in two non-adjacent 4 MiB holes"
    assert f"no contiguous {8 * MIB} bytes free" in report["message"]
    assert "fragmented" in report["message"]
    assert report["info"] == [12 * MIB, 16 * MIB]


def test_out_of_memory_in_raw_malloc_names_the_device(run_python):
    source = """
    import json
    import openreg_runtime as rt
    try:
        rt.malloc(3 << 20, device=1)
    except rt.OutOfMemoryError as error:
        print(json.dumps(str(error)))
    """
    message = run_python(source, env={"OPENREG_DEVICE_MEMORY": "2MiB"}).json()
    assert message.startswith("out of memory on OpenReg device 1:")
    assert f"tried to allocate {3 * MIB} bytes with 0 of {2 * MIB} bytes in use" in message


@pytest.mark.parametrize("value", ["lots", "0", "2TiB"])
def test_invalid_device_memory_is_initialization_error(run_python, value):
    source = """
    import json
    import openreg_runtime as rt
    try:
        rt.DeviceBuffer(16)
    except rt.InitializationError as error:
        print(json.dumps(str(error)))
    """
    message = run_python(source, env={"OPENREG_DEVICE_MEMORY": value}).json()
    assert f"OPENREG_DEVICE_MEMORY='{value}' is invalid" in message
    assert message.endswith("[orErrorInitialization]")
