"""Concurrency stress: many host threads allocating, copying and freeing at once.

Runs in a child interpreter so that "zero bytes in use afterwards" is exact
(no other test's allocations) and a deadlock becomes a timeout, not a hang.
"""

import pytest

STRESS = """
import json, random, sys, threading, time, traceback
import openreg_runtime as rt

THREADS = {threads}
DURATION = {duration}
count = rt.device_count()
deadline = time.monotonic() + DURATION
failures = []
operations = [0] * THREADS


def read_back(buffer, stream, rng):
    # Returns the buffer's contents, through a pinned async copy or a sync one.
    if rng.random() < 0.5:
        pinned = rt.HostBuffer(buffer.nbytes)
        buffer.copy_to(pinned, stream=stream)
        stream.synchronize()
        return bytes(pinned)
    stream.synchronize()  # sync copies are only ordered after the default stream
    return buffer.to_bytes()


def upload(buffer, data, stream, rng):
    mode = rng.randrange(4)
    if mode == 0:
        buffer.copy_from(data)
    elif mode == 1:
        pinned = rt.HostBuffer(len(data))
        memoryview(pinned)[:] = data
        buffer.copy_from(pinned, stream=stream)  # asynchronous
    elif mode == 2:
        buffer.copy_from(bytearray(data), stream=stream)  # pageable: done on return
    else:
        staging = rt.malloc_host(len(data))
        try:
            import ctypes
            ctypes.memmove(staging, data, len(data))
            rt.memcpy(buffer.ptr, staging, len(data), rt.MemcpyKind.DEFAULT)
        finally:
            rt.free_host(staging)


def worker(index):
    rng = random.Random(1234 + index)
    streams = [rt.Stream(device=d, priority=-rng.randrange(3)) for d in range(count)]
    try:
        while time.monotonic() < deadline:
            device = rng.randrange(count)
            stream = streams[device]
            size = rng.choice([1, 17, 4096, 4097, rng.randrange(1, 1 << 18)])
            data = rng.randbytes(size)
            if rng.random() < 0.5:
                buffer = rt.DeviceBuffer(size, device=device)
            else:
                with rt.device(device):
                    buffer = rt.DeviceBuffer(size)
            assert buffer.device == device
            upload(buffer, data, stream, rng)
            other = rng.randrange(count)
            copy = rt.DeviceBuffer(size, device=other)
            if rng.random() < 0.5:
                copy.copy_from(buffer, stream=stream)  # D2D, ordered after the upload
            else:
                stream.synchronize()
                copy.copy_from(buffer)
            if rng.random() < 0.3:
                streams[other].wait_stream(stream)
                got = read_back(copy, streams[other], rng)
                stream.synchronize()
            else:
                got = read_back(copy, stream, rng)
            if got != data:
                raise AssertionError(
                    f"thread {{index}}: {{size}} bytes via device {{device}} -> {{other}} "
                    "came back different"
                )
            if rng.random() < 0.5:
                buffer.free()
                copy.free()
            else:
                del buffer, copy  # freed by reference counting
            operations[index] += 1
        for stream in streams:
            stream.synchronize()
    except BaseException:
        failures.append(traceback.format_exc())


threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join(timeout=DURATION + 30)
hung = sum(thread.is_alive() for thread in threads)
for device in range(count):
    rt.synchronize(device=device)
info = [rt.mem_get_info(device=device) for device in range(count)]
print(json.dumps({{"failures": failures, "hung": hung, "operations": operations, "info": info}}))
"""


@pytest.mark.parametrize(("threads", "devices"), [(6, "2"), (8, "3")])
def test_concurrent_allocation_copy_and_free(run_python, threads, devices):
    result = run_python(
        STRESS.format(threads=threads, duration=3.0),
        env={"OPENREG_DEVICE_COUNT": devices, "OPENREG_DEVICE_MEMORY": "1GiB"},
        timeout=90,
    )
    report = result.json()
    assert report["failures"] == [], "\n".join(report["failures"])
    assert report["hung"] == 0
    assert all(count > 10 for count in report["operations"]), report["operations"]
    assert len(report["info"]) == int(devices)
    for device, (free, total) in enumerate(report["info"]):
        assert free == total, f"device {device}: {total - free} bytes still in use"
