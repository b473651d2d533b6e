"""Devices: count, per-thread current device, the device() context manager, synchronize."""

import threading

import pytest

import openreg_runtime as rt


def run_in_thread(function):
    """Run ``function`` on a new host thread and return its result (or raise its error)."""
    outcome = {}

    def target():
        try:
            outcome["value"] = function()
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def test_default_device_count_is_two():
    assert rt.device_count() == 2


def test_default_device_count_in_clean_process(run_python):
    result = run_python("import json, openreg_runtime as rt; print(json.dumps(rt.device_count()))")
    assert result.json() == 2


def test_runtime_version():
    assert rt.runtime_version() == 10  # major * 1000 + minor * 10 for 0.1


def test_current_device_starts_at_zero():
    assert rt.current_device() == 0
    assert run_in_thread(rt.current_device) == 0


@pytest.mark.parametrize("index", [0, 1])
def test_set_device_changes_current_device(index):
    rt.set_device(index)
    assert rt.current_device() == index


def test_current_device_is_per_thread():
    rt.set_device(1)

    def in_new_thread():
        seen_at_start = rt.current_device()
        rt.set_device(1)
        rt.set_device(0)
        return seen_at_start, rt.current_device()

    assert run_in_thread(in_new_thread) == (0, 0)
    # The other thread's set_device calls did not affect this thread.
    assert rt.current_device() == 1


def test_new_thread_allocates_on_device_zero_even_if_main_thread_uses_one():
    rt.set_device(1)

    def allocate():
        with rt.DeviceBuffer(16) as buffer:
            return buffer.device, rt.pointer_attributes(buffer.ptr).device

    assert run_in_thread(allocate) == (0, 0)


@pytest.mark.parametrize("index", [-1, 2, 16, 1000])
def test_set_device_rejects_invalid_index(index):
    rt.set_device(1)
    with pytest.raises(
        rt.InvalidDeviceError, match=rf"device index {index} is out of range"
    ) as info:
        rt.set_device(index)
    assert "there are 2 OpenReg devices" in str(info.value)
    assert "[orErrorInvalidDevice]" in str(info.value)
    assert rt.current_device() == 1, "a failed set_device must not change the current device"


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda index: rt.synchronize(device=index), id="synchronize"),
        pytest.param(lambda index: rt.mem_get_info(device=index), id="mem_get_info"),
        pytest.param(lambda index: rt.malloc(16, device=index), id="malloc"),
        pytest.param(lambda index: rt.DeviceBuffer(16, device=index), id="DeviceBuffer"),
        pytest.param(lambda index: rt.Stream(device=index), id="Stream"),
        pytest.param(lambda index: rt.Stream.default(device=index), id="Stream.default"),
        pytest.param(lambda index: rt.Event(device=index), id="Event"),
    ],
)
@pytest.mark.parametrize("index", [-1, 2])
def test_device_arguments_reject_invalid_index(call, index):
    with pytest.raises(rt.InvalidDeviceError, match=rf"device index {index} is out of range"):
        call(index)
    assert rt.current_device() == 0


def test_device_context_manager_switches_and_restores():
    assert rt.current_device() == 0
    with rt.device(1):
        assert rt.current_device() == 1
        with rt.device(0):
            assert rt.current_device() == 0
        assert rt.current_device() == 1
    assert rt.current_device() == 0


def test_device_context_manager_restores_after_exception():
    with pytest.raises(KeyError), rt.device(1):
        raise KeyError("inside")
    assert rt.current_device() == 0


def test_device_context_manager_rejects_invalid_index():
    rt.set_device(1)
    with pytest.raises(rt.InvalidDeviceError, match="device index 5 is out of range"):
        with rt.device(5):
            pytest.fail("the block must not run")
    assert rt.current_device() == 1


def test_device_context_manager_selects_allocation_device():
    with rt.device(1), rt.DeviceBuffer(32) as buffer:
        assert buffer.device == 1
        assert rt.pointer_attributes(buffer.ptr).device == 1


@pytest.mark.parametrize("index", [0, 1])
def test_synchronize_with_device_argument_waits_for_that_device(index):
    stream = rt.Stream(device=index)
    stream.sleep(0.2)
    rt.synchronize(device=index)
    assert stream.query()
    assert rt.current_device() == 0, "synchronize(device=...) must restore the current device"


def test_synchronize_without_argument_uses_current_device():
    stream = rt.Stream(device=1)
    stream.sleep(0.2)
    with rt.device(1):
        rt.synchronize()
    assert stream.query()


def test_device_synchronize_reports_stream_failure_once():
    stream = rt.Stream()

    def fail():
        raise RuntimeError("device work exploded")

    stream.launch(fail)
    with pytest.raises(rt.LaunchFailureError, match="device work exploded"):
        rt.synchronize()
    rt.synchronize()  # reported and cleared
    stream.synchronize()
