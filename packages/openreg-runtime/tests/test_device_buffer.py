"""DeviceBuffer: host<->device copies with every buffer type, offsets, fill, D2D, lifetime."""

import array
import ctypes

import pytest

import openreg_runtime as rt

PAYLOAD = bytes((i * 7 + 3) % 256 for i in range(256))


def host_buffer_with(data: bytes) -> rt.HostBuffer:
    pinned = rt.HostBuffer(len(data))
    memoryview(pinned)[:] = data
    return pinned


SOURCES = {
    "bytes": lambda data: bytes(data),
    "bytearray": lambda data: bytearray(data),
    "memoryview": lambda data: memoryview(bytearray(data)),
    "readonly-memoryview": lambda data: memoryview(bytes(data)),
    "memoryview-slice": lambda data: memoryview(b"xx" + data + b"yy")[2:-2],
    "array": lambda data: array.array("I", data),
    "ctypes": lambda data: (ctypes.c_ubyte * len(data)).from_buffer_copy(data),
    "HostBuffer": host_buffer_with,
}

# Each factory returns (destination object, function reading its bytes back).
DESTINATIONS = {
    "bytearray": lambda n: (lambda b: (b, lambda: bytes(b)))(bytearray(n)),
    "memoryview": lambda n: (lambda b: (memoryview(b), lambda: bytes(b)))(bytearray(n)),
    "array": lambda n: (lambda b: (b, b.tobytes))(array.array("I", bytes(n))),
    "ctypes": lambda n: (lambda b: (b, lambda: bytes(b)))((ctypes.c_ubyte * n)()),
    "HostBuffer": lambda n: (lambda b: (b, lambda: bytes(memoryview(b))))(rt.HostBuffer(n)),
}


@pytest.fixture
def buffer():
    with rt.DeviceBuffer(len(PAYLOAD)) as device_buffer:
        yield device_buffer


def test_properties():
    buffer = rt.DeviceBuffer(1000, device=1)
    assert buffer.nbytes == 1000
    assert len(buffer) == 1000
    assert buffer.device == 1
    assert buffer.freed is False
    assert isinstance(buffer.ptr, int)
    assert buffer.ptr != 0
    assert repr(buffer) == f"DeviceBuffer(nbytes=1000, device=1, ptr={hex(buffer.ptr)})"
    buffer.free()
    assert buffer.freed is True
    assert repr(buffer) == "DeviceBuffer(nbytes=1000, device=1, freed)"


def test_default_device_is_the_current_device():
    with rt.device(1):
        buffer = rt.DeviceBuffer(16)
    assert buffer.device == 1
    assert rt.pointer_attributes(buffer.ptr).device == 1


@pytest.mark.parametrize("source_kind", list(SOURCES))
def test_copy_from_host_source(buffer, source_kind):
    buffer.copy_from(SOURCES[source_kind](PAYLOAD))
    assert buffer.to_bytes() == PAYLOAD


@pytest.mark.parametrize("destination_kind", list(DESTINATIONS))
def test_copy_to_host_destination(buffer, destination_kind):
    buffer.copy_from(PAYLOAD)
    destination, read_back = DESTINATIONS[destination_kind](len(PAYLOAD))
    buffer.copy_to(destination)
    assert read_back() == PAYLOAD


@pytest.mark.parametrize("source_kind", list(SOURCES))
def test_copy_from_with_offset(buffer, source_kind):
    buffer.fill(0)
    chunk = PAYLOAD[:64]
    buffer.copy_from(SOURCES[source_kind](chunk), offset=100)
    assert buffer.to_bytes() == bytes(100) + chunk + bytes(len(PAYLOAD) - 164)


@pytest.mark.parametrize("destination_kind", list(DESTINATIONS))
def test_copy_to_with_offset(buffer, destination_kind):
    buffer.copy_from(PAYLOAD)
    destination, read_back = DESTINATIONS[destination_kind](32)
    buffer.copy_to(destination, offset=200)
    assert read_back() == PAYLOAD[200:232]


@pytest.mark.parametrize(
    ("offset", "count", "expected"),
    [
        (0, None, PAYLOAD),
        (10, None, PAYLOAD[10:]),
        (10, 5, PAYLOAD[10:15]),
        (0, 0, b""),
        (255, 1, PAYLOAD[255:]),
    ],
)
def test_to_bytes_ranges(buffer, offset, count, expected):
    buffer.copy_from(PAYLOAD)
    assert buffer.to_bytes(offset, count) == expected
    assert buffer.to_bytes(offset=offset, count=count) == expected


def test_to_bytes_at_the_end_of_the_buffer_is_empty(buffer):
    # offset == nbytes is in range (the code computes count 0 for it) and must
    # give b"", also when nbytes is a whole number of pages.
    buffer.copy_from(PAYLOAD)
    assert buffer.to_bytes(len(PAYLOAD)) == b""
    with rt.DeviceBuffer(4096) as whole_page:
        assert whole_page.to_bytes(4096) == b""


def test_empty_device_buffer():
    buffer = rt.DeviceBuffer(0)
    assert buffer.nbytes == 0
    assert buffer.ptr == 0
    buffer.copy_from(b"")
    buffer.copy_to(bytearray())
    buffer.fill(1)
    assert buffer.to_bytes() == b""
    buffer.free()


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda b: b.copy_from(b"x" * 10, offset=250), id="copy_from-overrun"),
        pytest.param(lambda b: b.copy_from(b"x", offset=257), id="copy_from-offset"),
        pytest.param(lambda b: b.copy_from(bytes(257)), id="copy_from-too-large"),
        pytest.param(lambda b: b.copy_to(bytearray(10), offset=250), id="copy_to-overrun"),
        pytest.param(lambda b: b.copy_to(bytearray(300)), id="copy_to-too-large"),
        pytest.param(lambda b: b.to_bytes(300), id="to_bytes-offset"),
        pytest.param(lambda b: b.to_bytes(200, 57), id="to_bytes-count"),
    ],
)
def test_out_of_range_is_value_error(buffer, call):
    with pytest.raises(ValueError, match="does not fit in a DeviceBuffer of 256 bytes") as info:
        call(buffer)
    assert not isinstance(info.value, rt.OpenRegError), "checked before reaching the runtime"


def test_out_of_range_message_names_range(buffer):
    with pytest.raises(ValueError, match="range of 10 bytes at offset 250"):
        buffer.copy_from(b"x" * 10, offset=250)


def test_copy_to_read_only_destination_is_rejected(buffer):
    buffer.copy_from(PAYLOAD)
    destination = bytes(len(PAYLOAD))
    with pytest.raises(BufferError, match="not writable"):
        buffer.copy_to(destination)
    with pytest.raises(BufferError, match="not writable"):
        buffer.copy_to(memoryview(destination))
    assert destination == bytes(len(PAYLOAD))


def test_non_contiguous_host_buffer_is_rejected(buffer):
    strided = memoryview(bytearray(512))[::2]
    with pytest.raises(ValueError, match="C-contiguous"):
        buffer.copy_from(strided)
    with pytest.raises(ValueError, match="C-contiguous"):
        buffer.copy_to(strided)


@pytest.mark.parametrize("bad", ["text", 42, None, [1, 2, 3]])
def test_non_buffer_objects_are_rejected(buffer, bad):
    with pytest.raises(TypeError, match="buffer protocol"):
        buffer.copy_from(bad)
    with pytest.raises(TypeError, match="buffer protocol"):
        buffer.copy_to(bad)


@pytest.mark.parametrize("value", [0, 1, 0x7F, 0xFF])
def test_fill(buffer, value):
    buffer.fill(value)
    assert buffer.to_bytes() == bytes([value]) * len(PAYLOAD)


@pytest.mark.parametrize("value", [-1, 256, 1000])
def test_fill_rejects_non_byte_values(buffer, value):
    with pytest.raises(ValueError, match=r"fill value must be a byte \(0..255\)"):
        buffer.fill(value)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda b: b.ptr, id="ptr"),
        pytest.param(lambda b: b.to_bytes(), id="to_bytes"),
        pytest.param(lambda b: b.copy_from(b"abc"), id="copy_from"),
        pytest.param(lambda b: b.copy_to(bytearray(3)), id="copy_to"),
        pytest.param(lambda b: b.fill(1), id="fill"),
        pytest.param(lambda b: rt.DeviceBuffer(16).copy_from(b), id="as-d2d-source"),
        pytest.param(lambda b: rt.DeviceBuffer(16).copy_to(b), id="as-d2d-destination"),
    ],
)
def test_use_after_free_is_value_error(call):
    buffer = rt.DeviceBuffer(16)
    buffer.free()
    with pytest.raises(ValueError, match="this DeviceBuffer was freed"):
        call(buffer)


def test_free_is_idempotent_and_returns_memory():
    before = rt.mem_get_info()
    buffer = rt.DeviceBuffer(1 << 20)
    assert rt.mem_get_info()[0] == before[0] - (1 << 20)
    buffer.free()
    buffer.free()
    assert rt.mem_get_info() == before


def test_context_manager_frees():
    before = rt.mem_get_info(device=1)
    with rt.DeviceBuffer(1 << 20, device=1) as buffer:
        assert isinstance(buffer, rt.DeviceBuffer)
        assert rt.mem_get_info(device=1)[0] == before[0] - (1 << 20)
    assert buffer.freed
    assert rt.mem_get_info(device=1) == before


def test_context_manager_frees_on_exception():
    before = rt.mem_get_info()
    with pytest.raises(ZeroDivisionError), rt.DeviceBuffer(8192) as buffer:
        raise ZeroDivisionError
    assert buffer.freed
    assert rt.mem_get_info() == before


def test_dropping_the_last_reference_frees():
    before = rt.mem_get_info()
    buffer = rt.DeviceBuffer(8192)
    del buffer
    assert rt.mem_get_info() == before


@pytest.mark.parametrize(("source_device", "destination_device"), [(0, 0), (1, 1), (0, 1), (1, 0)])
def test_device_to_device_copy_from(source_device, destination_device):
    with (
        rt.DeviceBuffer(256, device=source_device) as source,
        rt.DeviceBuffer(1024, device=destination_device) as destination,
    ):
        source.copy_from(PAYLOAD)
        destination.fill(0xEE)
        destination.copy_from(source, offset=300)
        assert destination.to_bytes() == b"\xee" * 300 + PAYLOAD + b"\xee" * (1024 - 556)
        assert source.to_bytes() == PAYLOAD


@pytest.mark.parametrize(("source_device", "destination_device"), [(0, 0), (0, 1), (1, 0)])
def test_device_to_device_copy_to(source_device, destination_device):
    with (
        rt.DeviceBuffer(256, device=source_device) as source,
        rt.DeviceBuffer(16, device=destination_device) as destination,
    ):
        source.copy_from(PAYLOAD)
        source.copy_to(destination, offset=100)
        assert destination.to_bytes() == PAYLOAD[100:116]


def test_device_to_device_copy_that_does_not_fit_is_value_error(buffer):
    with rt.DeviceBuffer(512, device=1) as larger:
        with pytest.raises(ValueError, match="does not fit"):
            buffer.copy_from(larger)
        with pytest.raises(ValueError, match="does not fit"):
            buffer.copy_to(larger)


def test_copy_within_the_same_buffer(buffer):
    buffer.copy_from(PAYLOAD)
    with rt.DeviceBuffer(16) as temporary:
        buffer.copy_to(temporary, offset=0)
        buffer.copy_from(temporary, offset=128)
    assert buffer.to_bytes() == PAYLOAD[:128] + PAYLOAD[:16] + PAYLOAD[144:]


def test_copies_on_a_stream(buffer):
    stream = rt.Stream()
    pinned = host_buffer_with(PAYLOAD)
    buffer.copy_from(pinned, stream=stream)
    result = rt.HostBuffer(len(PAYLOAD))
    buffer.copy_to(result, stream=stream)
    stream.synchronize()
    assert bytes(memoryview(result)) == PAYLOAD


def test_stream_copy_keeps_memory_alive_after_python_references_are_dropped(hold_stream):
    before = rt.mem_get_info()
    stream = rt.Stream()
    device_buffer = rt.DeviceBuffer(len(PAYLOAD))
    device_buffer.copy_from(PAYLOAD)
    result = rt.HostBuffer(len(PAYLOAD))
    release = hold_stream(stream)
    device_buffer.copy_to(result, stream=stream)
    device_buffer.free()  # the queued copy still owns the allocation...
    del device_buffer
    assert rt.mem_get_info()[0] < before[0], "memory was released under a pending copy"
    release()
    stream.synchronize()
    assert bytes(memoryview(result)) == PAYLOAD
    assert rt.mem_get_info() == before  # ...and releases it once the copy is done


def test_device_to_device_copy_on_a_stream_across_devices():
    stream = rt.Stream(device=1)
    with rt.DeviceBuffer(256, device=0) as source, rt.DeviceBuffer(256, device=1) as target:
        source.copy_from(PAYLOAD)
        target.copy_from(source, stream=stream)
        stream.synchronize()
        assert target.to_bytes() == PAYLOAD
