"""Tour of the OpenReg runtime from Python (no torch needed).

Run from the repository root: ``uv run examples/runtime_demo.py``.
"""

from __future__ import annotations

import array

import openreg_runtime as ort


def main() -> None:
    version = ort.runtime_version()
    print(f"OpenReg runtime {version // 1000}.{version % 1000 // 10}: {ort.device_count()} devices")
    for index in range(ort.device_count()):
        free, total = ort.mem_get_info(index)
        print(f"  device {index}: {free / 2**30:.1f} GiB free of {total / 2**30:.1f} GiB")

    values = array.array("d", range(8))
    with ort.DeviceBuffer(values.itemsize * len(values), device=0) as buffer:
        buffer.copy_from(values)
        print(f"device memory at {buffer.ptr:#x}: host code cannot dereference it")
        attributes = ort.pointer_attributes(buffer.ptr + 8)
        print(f"  an interior pointer resolves to its allocation: {attributes.allocation_base:#x}")

        # Asynchronous work: a copy into pinned memory queued behind a slow kernel.
        stream = ort.Stream(device=0)
        start, end = ort.Event(enable_timing=True), ort.Event(enable_timing=True)
        pinned = ort.HostBuffer(buffer.nbytes)
        start.record(stream)
        stream.sleep(0.05)
        buffer.copy_to(pinned, stream=stream)
        end.record(stream)
        print(f"  right after enqueueing, the stream is idle: {stream.query()}")
        end.synchronize()
        copied = array.array("d", bytes(memoryview(pinned)))
        print(f"  after synchronizing: {list(copied)} in {start.elapsed_time(end):.1f} ms")

        # Cross-device copy.
        with ort.DeviceBuffer(buffer.nbytes, device=1) as other:
            other.copy_from(buffer)
            print(f"  device 1 holds the same bytes: {other.to_bytes() == buffer.to_bytes()}")

    try:
        ort.DeviceBuffer(1 << 50)
    except ort.OutOfMemoryError as error:
        print(f"out of memory is an exception: {error}")


if __name__ == "__main__":
    main()
