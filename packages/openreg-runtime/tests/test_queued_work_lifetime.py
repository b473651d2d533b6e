"""Memory that queued work still uses stays valid until that work has run.

Freeing is stream-ordered (see docs/memory-model.md): ``orFree``/``orFreeHost``
return at once, and the memory is handed out again (or returned to the system)
only once every piece of work that was queued before the free has completed.
The crash-prone cases (host memory unmapped under a pending copy) run in a
fresh interpreter; ``hold_stream`` keeps the work queued deterministically.
"""

import gc
import threading

import pytest

import openreg_runtime as rt

K = rt.MemcpyKind
MIB = 1 << 20
# Above glibc's mmap threshold: freeing such a block unmaps it, so a copy
# that runs after the free touches unmapped memory and crashes at once.
LARGE = 4 * MIB

# The child's copy of conftest.hold (a fresh interpreter has no fixtures).
HOLD = """
import gc, json, threading
import openreg_runtime as rt

def hold(stream):
    running, release = threading.Event(), threading.Event()
    stream.launch(lambda: (running.set(), release.wait(60)))
    assert running.wait(60)
    return release.set
"""

PINNED_VIEWS = {
    "memoryview": "memoryview(rt.HostBuffer(size))",
    "numpy": "numpy.asarray(rt.HostBuffer(size))",
    "memoryview-slice": "memoryview(rt.HostBuffer(2 * size))[size:]",
}


@pytest.mark.parametrize("view", list(PINNED_VIEWS))
def test_async_copy_into_a_dropped_view_of_pinned_memory(run_python, view):
    source = (
        HOLD
        + f"""
import numpy
size = {LARGE}
stream = rt.Stream()
device = rt.DeviceBuffer(size)
device.fill(7)
release = hold(stream)
destination = {PINNED_VIEWS[view]}
device.copy_to(destination, stream=stream)
del destination
gc.collect()
junk = [bytearray(size) for _ in range(4)]  # reuse whatever was freed
release()
stream.synchronize()
print(json.dumps("survived"))
"""
    )
    assert run_python(source).json() == "survived"


@pytest.mark.parametrize("view", list(PINNED_VIEWS))
def test_async_copy_from_a_dropped_view_of_pinned_memory(run_python, view):
    source = (
        HOLD
        + f"""
import numpy
size = {LARGE}
stream = rt.Stream()
device = rt.DeviceBuffer(size)
release = hold(stream)
origin = {PINNED_VIEWS[view]}
memoryview(origin).cast("B")[:] = bytes([0x5A]) * size
device.copy_from(origin, stream=stream)
del origin
gc.collect()
junk = [bytearray(b"x" * size) for _ in range(4)]
release()
stream.synchronize()
print(json.dumps(device.to_bytes() == bytes([0x5A]) * size))
"""
    )
    assert run_python(source).json() is True


def queue_write(stream, pointer, pinned, size):
    """Queue a host-to-device copy of ``pinned`` into ``pointer`` on ``stream``."""
    rt.memcpy_async(pointer, pinned.ptr, size, K.HOST_TO_DEVICE, stream=stream)


def read_device(pointer, size):
    out = rt.HostBuffer(size)
    rt.memcpy(out.ptr, pointer, size, K.DEVICE_TO_HOST)
    return bytes(out)


@pytest.mark.parametrize("how", ["free", "DeviceBuffer.free", "DeviceBuffer-dropped"])
def test_memory_freed_under_queued_work_is_not_handed_out_again(hold_stream, how):
    size = MIB
    stream = rt.Stream()
    pinned = rt.HostBuffer(size)
    memoryview(pinned)[:] = b"\xab" * size
    release = hold_stream(stream)
    if how == "free":
        freed = rt.malloc(size)
        queue_write(stream, freed, pinned, size)
        rt.free(freed)
    else:
        buffer = rt.DeviceBuffer(size)
        freed = buffer.ptr
        queue_write(stream, freed, pinned, size)
        if how == "DeviceBuffer.free":
            buffer.free()
        else:
            del buffer
            gc.collect()
    # New allocations must not receive the queued write. Allocate until one
    # gets the freed address (what happened before frees waited) or 16 did not.
    fresh = []
    while len(fresh) < 16 and freed not in [buffer.ptr for buffer in fresh]:
        fresh.append(rt.DeviceBuffer(size))
        fresh[-1].fill(0)
    release()
    stream.synchronize()
    for buffer in fresh:
        assert buffer.to_bytes() == bytes(size), "queued work wrote into a new allocation"


def test_freed_memory_comes_back_once_the_queued_work_has_run(hold_stream):
    stream = rt.Stream()
    free_before, _ = rt.mem_get_info()
    pointer = rt.malloc(MIB)
    release = hold_stream(stream)
    rt.memset(pointer, 1, MIB)  # default stream: not held
    pinned = rt.HostBuffer(MIB)
    queue_write(stream, pointer, pinned, MIB)
    rt.free(pointer)
    # The address is no longer an allocation for the API, whatever the queue holds.
    with pytest.raises(rt.InvalidDevicePointerError, match="not in a live allocation"):
        rt.pointer_attributes(pointer)
    with pytest.raises(rt.InvalidDevicePointerError):
        rt.free(pointer)
    release()
    stream.synchronize()
    assert rt.mem_get_info()[0] == free_before


def test_allocation_waits_for_pending_frees_instead_of_running_out(run_python):
    # 8 MiB device; 6 MiB freed while a held stream still writes it: the next
    # 6 MiB allocation only fits once that write has run, and must wait for it.
    source = (
        HOLD
        + """
size = 6 << 20
stream = rt.Stream()
pinned = rt.HostBuffer(size)
release = hold(stream)
old = rt.malloc(size)
rt.memcpy_async(old, pinned.ptr, size, rt.MemcpyKind.HOST_TO_DEVICE, stream=stream)
rt.free(old)
threading.Timer(0.2, release).start()
fresh = rt.malloc(size)   # waits for the held stream
rt.free(fresh)
print(json.dumps(rt.mem_get_info()))
"""
    )
    report = run_python(source, env={"OPENREG_DEVICE_MEMORY": "8MiB"}).json()
    assert report == [8 * MIB, 8 * MIB]


def test_free_host_with_a_pending_copy_from_it(run_python):
    source = (
        HOLD
        + f"""
size = {LARGE}
stream = rt.Stream()
device = rt.DeviceBuffer(size)
pinned = rt.malloc_host(size)
import ctypes
ctypes.memset(pinned, 0x3C, size)
release = hold(stream)
rt.memcpy_async(device.ptr, pinned, size, rt.MemcpyKind.HOST_TO_DEVICE, stream=stream)
rt.free_host(pinned)
junk = [bytearray(b"y" * size) for _ in range(4)]
release()
stream.synchronize()
print(json.dumps(device.to_bytes() == bytes([0x3C]) * size))
"""
    )
    assert run_python(source).json() is True


def test_free_host_with_a_pending_copy_into_it(run_python):
    source = (
        HOLD
        + f"""
size = {LARGE}
stream = rt.Stream()
device = rt.DeviceBuffer(size)
device.fill(9)
pinned = rt.malloc_host(size)
release = hold(stream)
rt.memcpy_async(pinned, device.ptr, size, rt.MemcpyKind.DEVICE_TO_HOST, stream=stream)
rt.free_host(pinned)
try:
    rt.free_host(pinned)
except rt.InvalidHostPointerError:
    twice = "rejected"
junk = [bytearray(size) for _ in range(4)]
release()
stream.synchronize()
print(json.dumps(twice))
"""
    )
    assert run_python(source).json() == "rejected"


def test_buffers_dropped_by_stream_work_are_released(hold_stream):
    # The last reference to a buffer can die on a worker thread (the no-op that
    # keeps an asynchronous copy's memory alive); freeing there must not wait.
    stream = rt.Stream()
    free_before, _ = rt.mem_get_info()
    release = hold_stream(stream)
    buffer = rt.DeviceBuffer(MIB)
    buffer.copy_from(rt.HostBuffer(MIB), stream=stream)
    del buffer
    done = threading.Event()
    stream.launch(done.set)
    release()
    assert done.wait(60)
    stream.synchronize()
    rt.synchronize()
    assert rt.mem_get_info()[0] == free_before


# Inside stream work, a free is ordered at that work on its own stream: work
# queued behind it there runs after the free in stream order, so it is not
# waited for, while other streams' queued work still is. An 8 MiB device fits
# one 6 MiB allocation at a time: the allocation made inside the same work
# succeeds only if the free released the memory at once.
FREE_INSIDE_WORK = (
    HOLD
    + """
size = 6 << 20
stream, other = rt.Stream(), rt.Stream()
outcome = []

def free_then_allocate(pointer):
    rt.free(pointer)
    try:
        rt.free(rt.malloc(size))
        outcome.append("reused")
    except rt.OutOfMemoryError:
        outcome.append("out of memory")

pointer = rt.malloc(size)
release_other = hold(other) if OTHER_BUSY else (lambda: None)
release = hold(stream)
stream.launch(lambda: free_then_allocate(pointer))
stream.launch(lambda: None)  # queued behind the freeing work on its stream
release()
stream.synchronize()
release_other()
rt.synchronize()
print(json.dumps(outcome))
"""
)


@pytest.mark.parametrize("other_busy, expected", [(False, "reused"), (True, "out of memory")])
def test_free_inside_stream_work_is_ordered_at_that_work(run_python, other_busy, expected):
    source = f"OTHER_BUSY = {other_busy}\n" + FREE_INSIDE_WORK
    report = run_python(source, env={"OPENREG_DEVICE_MEMORY": "8MiB"})
    assert report.json() == [expected], report
