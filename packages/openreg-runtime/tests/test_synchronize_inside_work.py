"""Synchronizing from inside stream work is refused (orErrorNotPermitted), as in CUDA.

Work waiting for its own stream (or for the device it runs on) can never
finish; the runtime refuses every synchronizing call made from inside stream
work, with a message saying so, and the stream keeps working. The first run
of each case is in a fresh interpreter with a timeout, because the
old behaviour was a hang.
"""

import pytest

import openreg_runtime as rt

CALLS = {
    "Stream.synchronize (own stream)": "stream.synchronize()",
    "Stream.synchronize (another stream)": "other.synchronize()",
    "synchronize (device)": "rt.synchronize()",
    "synchronize (other device)": "rt.synchronize(device=1)",
    "Event.synchronize": "event.synchronize()",
    "memcpy (synchronous copy)": "rt.memcpy(host.ptr, device.ptr, 16, K.DEVICE_TO_HOST)",
    "DeviceBuffer.to_bytes": "device.to_bytes()",
    "DeviceBuffer.fill": "device.fill(1)",
}

SOURCE = """
import json
import openreg_runtime as rt

K = rt.MemcpyKind
stream, other = rt.Stream(), rt.Stream()
device, host = rt.DeviceBuffer(64), rt.HostBuffer(64)
event = stream.record_event()
outcome = {{}}

def inside():
    try:
        {call}
        outcome["error"] = None
    except rt.NotPermittedError as error:
        outcome["error"] = str(error)

stream.launch(inside)
stream.synchronize()
# The stream (and the device) keep working afterwards.
ran = []
stream.launch(lambda: ran.append(True))
stream.synchronize()
rt.synchronize()
outcome["later_work_ran"] = ran == [True]
print(json.dumps(outcome))
"""


@pytest.mark.parametrize("call", list(CALLS))
def test_synchronizing_inside_stream_work_is_not_permitted(run_python, call):
    outcome = run_python(SOURCE.format(call=CALLS[call]), timeout=60).json()
    assert outcome["later_work_ran"] is True
    message = outcome["error"]
    assert message is not None, f"{call} inside stream work did not raise"
    assert "inside work running on an OpenReg stream" in message
    assert "[orErrorNotPermitted]" in message


def test_non_blocking_calls_stay_allowed_inside_work():
    stream, other = rt.Stream(), rt.Stream()
    seen = {}

    def inside():
        seen["query"] = other.query()
        seen["event"] = other.record_event().query() in (True, False)
        other.launch(lambda: seen.update(nested=True))  # enqueueing elsewhere is fine
        seen["info"] = rt.mem_get_info()[1] > 0

    stream.launch(inside)
    stream.synchronize()
    other.synchronize()
    assert seen == {"query": True, "event": True, "nested": True, "info": True}
