"""Raw memcpy / memcpy_async: kinds, direction checks, ranges, asynchrony."""

import ctypes
import threading

import pytest

import openreg_runtime as rt

K = rt.MemcpyKind
SIZE = 4096
DATA = bytes((i * 31 + 5) % 256 for i in range(SIZE))


@pytest.fixture
def memory(device_memory, pinned_memory):
    """One allocation of each memory type, with helpers to write and read them."""

    class Memory:
        pageable = ctypes.create_string_buffer(SIZE)
        pageable_2 = ctypes.create_string_buffer(SIZE)
        pinned = pinned_memory(SIZE)
        device = device_memory(SIZE)
        device_2 = device_memory(SIZE)
        other_device = device_memory(SIZE, device=1)

        def address(self, name):
            value = getattr(self, name)
            return ctypes.addressof(value) if isinstance(value, ctypes.Array) else value

        def write(self, name, data):
            address = self.address(name)
            if name.startswith(("device", "other_device")):
                staging = ctypes.create_string_buffer(data, len(data))
                rt.memcpy(address, ctypes.addressof(staging), len(data), K.HOST_TO_DEVICE)
            else:
                ctypes.memmove(address, data, len(data))

        def read(self, name, count=SIZE):
            address = self.address(name)
            if name.startswith(("device", "other_device")):
                staging = ctypes.create_string_buffer(count)
                rt.memcpy(ctypes.addressof(staging), address, count, K.DEVICE_TO_HOST)
                return staging.raw
            return ctypes.string_at(address, count)

    return Memory()


VALID = [
    ("pageable", "pageable_2", K.HOST_TO_HOST),
    ("pinned", "pageable", K.HOST_TO_HOST),
    ("device", "pageable", K.HOST_TO_DEVICE),
    ("device", "pinned", K.HOST_TO_DEVICE),
    ("pageable", "device", K.DEVICE_TO_HOST),
    ("pinned", "device", K.DEVICE_TO_HOST),
    ("device_2", "device", K.DEVICE_TO_DEVICE),
    ("other_device", "device", K.DEVICE_TO_DEVICE),
    ("device", "other_device", K.DEVICE_TO_DEVICE),
]


@pytest.mark.parametrize(("dst", "src", "kind"), VALID)
def test_memcpy_with_matching_kind(memory, dst, src, kind):
    memory.write(src, DATA)
    memory.write(dst, bytes(SIZE))
    rt.memcpy(memory.address(dst), memory.address(src), SIZE, kind)
    assert memory.read(dst) == DATA


@pytest.mark.parametrize(("dst", "src", "_kind"), VALID)
def test_memcpy_default_infers_the_direction(memory, dst, src, _kind):
    memory.write(src, DATA)
    memory.write(dst, bytes(SIZE))
    rt.memcpy(memory.address(dst), memory.address(src), SIZE, K.DEFAULT)
    assert memory.read(dst) == DATA


@pytest.mark.parametrize(("dst", "src", "kind"), VALID)
def test_memcpy_async_with_matching_kind(memory, dst, src, kind):
    stream = rt.Stream()
    memory.write(src, DATA)
    memory.write(dst, bytes(SIZE))
    rt.memcpy_async(memory.address(dst), memory.address(src), SIZE, kind, stream)
    stream.synchronize()
    assert memory.read(dst) == DATA


def test_memcpy_with_offsets_and_partial_counts(memory):
    memory.write("device", DATA)
    memory.write("pageable", bytes(SIZE))
    rt.memcpy(memory.address("pageable") + 10, memory.address("device") + 1000, 500, K.DEFAULT)
    assert memory.read("pageable") == bytes(10) + DATA[1000:1500] + bytes(SIZE - 510)


# (kind, dst, src, the side named in the message, what that side really is)
WRONG = [
    (K.HOST_TO_DEVICE, "device", "device_2", "source", "device memory"),
    (K.HOST_TO_DEVICE, "pageable", "pageable_2", "destination", "pageable host memory"),
    (K.HOST_TO_DEVICE, "pinned", "pageable", "destination", "pinned host memory"),
    (K.DEVICE_TO_HOST, "pageable", "pageable_2", "source", "pageable host memory"),
    (K.DEVICE_TO_HOST, "pageable", "pinned", "source", "pinned host memory"),
    (K.DEVICE_TO_HOST, "device", "device_2", "destination", "device memory"),
    (K.HOST_TO_HOST, "device", "pageable", "destination", "device memory"),
    (K.HOST_TO_HOST, "pageable", "device", "source", "device memory"),
    (K.DEVICE_TO_DEVICE, "pageable", "device", "destination", "pageable host memory"),
    (K.DEVICE_TO_DEVICE, "device", "pinned", "source", "pinned host memory"),
]

KIND_NAMES = {
    K.HOST_TO_HOST: "orMemcpyHostToHost",
    K.HOST_TO_DEVICE: "orMemcpyHostToDevice",
    K.DEVICE_TO_HOST: "orMemcpyDeviceToHost",
    K.DEVICE_TO_DEVICE: "orMemcpyDeviceToDevice",
}


@pytest.mark.parametrize("asynchronous", [False, True], ids=["memcpy", "memcpy_async"])
@pytest.mark.parametrize(("kind", "dst", "src", "side", "actual"), WRONG)
def test_wrong_kind_is_invalid_direction(memory, kind, dst, src, side, actual, asynchronous):
    memory.write(dst, DATA)
    before = memory.read(dst)
    args = (memory.address(dst), memory.address(src), SIZE, kind)
    with pytest.raises(rt.InvalidMemcpyDirectionError) as info:
        if asynchronous:
            rt.memcpy_async(*args, rt.Stream())
        else:
            rt.memcpy(*args)
    message = str(info.value)
    assert message.startswith(KIND_NAMES[kind])
    assert f"memory as {side}" in message
    assert f"is {actual}" in message
    assert "[orErrorInvalidMemcpyDirection]" in message
    rt.synchronize()
    assert memory.read(dst) == before, "a rejected copy must not write anything"


@pytest.mark.parametrize(
    ("dst", "src", "dst_offset", "src_offset", "count", "role"),
    [
        ("device", "pageable", 0, 0, SIZE + 1, "dst"),
        ("device", "pageable", 4000, 0, 97, "dst"),
        ("pageable", "device", 0, 1, SIZE, "src"),
        ("device", "device_2", 0, 2048, 2049, "src"),
        ("other_device", "device", 4095, 0, 2, "dst"),
    ],
)
def test_overrunning_an_allocation_is_invalid_value(
    memory, dst, src, dst_offset, src_offset, count, role
):
    pageable_big = ctypes.create_string_buffer(2 * SIZE)
    addresses = {"pageable": ctypes.addressof(pageable_big)}
    dst_address = addresses.get(dst, memory.address(dst)) + dst_offset
    src_address = addresses.get(src, memory.address(src)) + src_offset
    with pytest.raises(rt.InvalidValueError, match=rf"^{role} range of {count} bytes") as info:
        rt.memcpy(dst_address, src_address, count, K.DEFAULT)
    assert f"overruns its {SIZE}-byte allocation" in str(info.value)


def test_count_zero_is_a_no_op(memory):
    memory.write("device", DATA)
    memory.write("pageable", b"\x01" * SIZE)
    for kind in (K.DEVICE_TO_HOST, K.DEFAULT):
        rt.memcpy(memory.address("pageable"), memory.address("device"), 0, kind)
    rt.memcpy(memory.address("device"), memory.address("pageable"), 0, K.HOST_TO_DEVICE)
    rt.memcpy(memory.address("pageable"), 0, 0, K.HOST_TO_HOST)
    assert memory.read("pageable") == b"\x01" * SIZE
    assert memory.read("device") == DATA


@pytest.mark.parametrize(
    ("null_side", "kind"),
    [("dst", K.HOST_TO_DEVICE), ("src", K.DEVICE_TO_HOST), ("dst", K.DEFAULT), ("src", K.DEFAULT)],
)
def test_null_with_nonzero_count_is_invalid_value(memory, null_side, kind):
    dst = 0 if null_side == "dst" else memory.address("pageable" if kind == 2 else "device")
    src = 0 if null_side == "src" else memory.address("pageable" if kind == 1 else "device")
    with pytest.raises(rt.InvalidValueError, match=f"memcpy of 16 bytes with a NULL {null_side}"):
        rt.memcpy(dst, src, 16, kind)


@pytest.mark.parametrize("kind", [5, 7, -1])
def test_invalid_kind_value_is_rejected_by_the_binding(memory, kind):
    with pytest.raises(TypeError, match="incompatible function arguments") as info:
        rt.memcpy(memory.address("pageable"), memory.address("pageable_2"), 16, kind)
    assert "MemcpyKind" in str(info.value)
    with pytest.raises(ValueError, match=f"{kind} is not a valid MemcpyKind"):
        rt.MemcpyKind(kind)


@pytest.mark.parametrize("kind", [5, 7, 1000])
def test_invalid_kind_value_is_rejected_by_the_c_api(lib, memory, kind):
    status = lib.orMemcpy(memory.address("pageable"), memory.address("pageable_2"), 16, kind)
    assert status == rt.InvalidMemcpyDirectionError.code
    message = lib.orGetLastErrorMessage().decode()
    assert f"memcpy kind {kind} is not an orMemcpyKind value" in message
    assert lib.orGetLastError() == rt.InvalidMemcpyDirectionError.code
    assert lib.orGetLastError() == 0


def test_memcpy_kind_values_match_the_c_enum():
    assert [int(k) for k in K] == [0, 1, 2, 3, 4]
    assert [k.name for k in K] == [
        "HOST_TO_HOST",
        "HOST_TO_DEVICE",
        "DEVICE_TO_HOST",
        "DEVICE_TO_DEVICE",
        "DEFAULT",
    ]


def test_memcpy_from_freed_device_memory_is_invalid_device_pointer(memory):
    pointer = rt.malloc(SIZE)
    rt.free(pointer)
    with pytest.raises(rt.InvalidDevicePointerError, match=r"src .* not in a live allocation"):
        rt.memcpy(memory.address("pageable"), pointer, 16, K.DEVICE_TO_HOST)
    with pytest.raises(rt.InvalidDevicePointerError, match=r"dst .* not in a live allocation"):
        rt.memcpy(pointer, memory.address("pageable"), 16, K.DEFAULT)


def test_memcpy_is_ordered_after_default_stream_work(memory, hold_stream):
    """A synchronous memcpy waits for earlier work on the device's default stream."""
    memory.write("device", bytes(SIZE))
    memory.write("pinned", DATA)
    default = rt.Stream.default()
    release = hold_stream(default)
    rt.memcpy_async(memory.address("device"), memory.address("pinned"), SIZE, K.DEFAULT, None)
    assert not default.query(), "the pinned copy should still be queued behind the held work"
    threading.Timer(0.1, release).start()
    assert memory.read("device") == DATA  # a synchronous copy: waits for the release


def test_memcpy_async_to_pinned_memory_is_asynchronous(memory, hold_stream):
    memory.write("device", DATA)
    pinned = rt.HostBuffer(SIZE)
    memoryview(pinned)[:] = b"\xcc" * SIZE
    stream = rt.Stream()
    release = hold_stream(stream)
    rt.memcpy_async(pinned.ptr, memory.address("device"), SIZE, K.DEVICE_TO_HOST, stream)
    assert stream.query() is False
    assert bytes(pinned) == b"\xcc" * SIZE, "the copy ran before the work queued ahead of it"
    release()
    stream.synchronize()
    assert stream.query() is True
    assert bytes(pinned) == DATA


def test_memcpy_async_from_pinned_memory_is_asynchronous(memory, hold_stream):
    memory.write("device", bytes(SIZE))
    pinned = rt.HostBuffer(SIZE)
    memoryview(pinned)[:] = DATA
    stream = rt.Stream()
    release = hold_stream(stream)
    rt.memcpy_async(memory.address("device"), pinned.ptr, SIZE, K.HOST_TO_DEVICE, stream)
    assert stream.query() is False
    release()
    stream.synchronize()
    assert memory.read("device") == DATA


def test_memcpy_async_device_to_device_is_asynchronous(memory, hold_stream):
    memory.write("device", DATA)
    memory.write("device_2", bytes(SIZE))
    stream = rt.Stream()
    release = hold_stream(stream)
    rt.memcpy_async(
        memory.address("device_2"), memory.address("device"), SIZE, K.DEVICE_TO_DEVICE, stream
    )
    assert stream.query() is False
    release()
    stream.synchronize()
    assert memory.read("device_2") == DATA


@pytest.mark.parametrize("kind", [K.DEVICE_TO_HOST, K.DEFAULT])
def test_memcpy_async_to_pageable_memory_completes_before_returning(memory, kind):
    memory.write("device", DATA)
    destination = bytearray(b"\xcc" * SIZE)
    address = ctypes.addressof((ctypes.c_char * SIZE).from_buffer(destination))
    stream = rt.Stream()
    stream.sleep(0.3)
    rt.memcpy_async(address, memory.address("device"), SIZE, kind, stream)
    assert bytes(destination) == DATA
    assert stream.query() is True


def test_memcpy_async_from_pageable_memory_completes_before_returning(memory):
    source = ctypes.create_string_buffer(DATA, SIZE)
    stream = rt.Stream(device=1)
    stream.sleep(0.2)
    rt.memcpy_async(
        memory.address("other_device"), ctypes.addressof(source), SIZE, K.HOST_TO_DEVICE, stream
    )
    assert stream.query() is True
    source[:] = b"\x00" * SIZE  # safe to reuse at once
    assert memory.read("other_device") == DATA


def test_memcpy_async_without_stream_uses_the_default_stream(memory, hold_stream):
    memory.write("device", DATA)
    pinned = rt.HostBuffer(SIZE)
    default = rt.Stream.default()
    release = hold_stream(default)
    rt.memcpy_async(pinned.ptr, memory.address("device"), SIZE, K.DEVICE_TO_HOST)
    assert default.query() is False
    release()
    default.synchronize()
    assert bytes(pinned) == DATA


# Pinned allocations have known sizes: copies are range-checked against them as
# against device allocations. Run in a fresh interpreter: without the check,
# these copies overflow the C heap.
PINNED_OVERRUN = """
import json
import openreg_runtime as rt

K = rt.MemcpyKind
MIB = 1 << 20
pinned = rt.malloc_host(4096)
big_pinned = rt.malloc_host(1 << 20)
device = rt.malloc(1 << 20)
stream = rt.Stream()
cases = {
    "async device->pinned": lambda: rt.memcpy_async(pinned, device, MIB, K.DEVICE_TO_HOST, stream),
    "async pinned->device": lambda: rt.memcpy_async(device, pinned, MIB, K.HOST_TO_DEVICE, stream),
    "sync device->pinned": lambda: rt.memcpy(pinned, device, 4097, K.DEVICE_TO_HOST),
    "default kind, interior": lambda: rt.memcpy(pinned + 4000, device, 97, K.DEFAULT),
    "pinned->pinned": lambda: rt.memcpy(pinned, big_pinned, 8192, K.HOST_TO_HOST),
    "async pinned->pinned": lambda: rt.memcpy_async(big_pinned, pinned, 8192, K.DEFAULT, stream),
    "exact fit": lambda: rt.memcpy_async(pinned + 96, device, 4000, K.DEVICE_TO_HOST, stream),
}
report = {}
for name, copy in cases.items():
    try:
        copy()
        stream.synchronize()
        report[name] = "copied"
    except rt.OpenRegError as error:
        report[name] = [type(error).__name__, str(error)]
print(json.dumps(report))
"""


def test_copies_overrunning_pinned_memory_are_invalid_value(run_python):
    report = run_python(PINNED_OVERRUN).json()
    assert report.pop("exact fit") == "copied"
    roles = {
        "async device->pinned": ("dst", 1 << 20, 4096),
        "async pinned->device": ("src", 1 << 20, 4096),
        "sync device->pinned": ("dst", 4097, 4096),
        "default kind, interior": ("dst", 97, 4096),
        "pinned->pinned": ("dst", 8192, 4096),
        "async pinned->pinned": ("src", 8192, 4096),
    }
    for name, (role, count, size) in roles.items():
        kind, message = report[name]
        assert kind == "InvalidValueError", (name, message)
        assert message.startswith(f"{role} range of {count} bytes"), (name, message)
        assert f"overruns its {size}-byte pinned allocation" in message, (name, message)
