"""HostBuffer: pinned host memory exposed through the buffer protocol."""

import ctypes
import gc

import pytest

import openreg_runtime as rt


@pytest.mark.parametrize("size", [1, 100, 4096, 100_000])
def test_memoryview_shape(size):
    pinned = rt.HostBuffer(size)
    assert pinned.nbytes == size
    assert len(pinned) == size
    view = memoryview(pinned)
    assert view.nbytes == size
    assert view.format == "B"
    assert view.itemsize == 1
    assert view.ndim == 1
    assert view.shape == (size,)
    assert not view.readonly
    assert view.c_contiguous


def test_memoryview_aliases_the_pinned_allocation():
    pinned = rt.HostBuffer(64)
    view = memoryview(pinned)
    view[:] = bytes(range(64))
    assert ctypes.string_at(pinned.ptr, 64) == bytes(range(64))
    address = ctypes.addressof((ctypes.c_char * 64).from_buffer(view))
    assert address == pinned.ptr
    ctypes.memset(pinned.ptr + 10, 0xAA, 4)
    assert bytes(view[10:14]) == b"\xaa" * 4


def test_host_buffer_is_pinned_memory():
    pinned = rt.HostBuffer(4096)
    attributes = rt.pointer_attributes(pinned.ptr + 100)
    assert attributes.type == rt.MemoryType.HOST
    assert attributes.allocation_base == pinned.ptr
    assert attributes.allocation_size == 4096


def test_host_buffer_works_with_bytes_and_bytearray_constructors():
    pinned = rt.HostBuffer(5)
    memoryview(pinned)[:] = b"hello"
    assert bytes(pinned) == b"hello"
    assert bytearray(pinned) == bytearray(b"hello")


def test_host_buffer_is_released_with_its_last_reference():
    pinned = rt.HostBuffer(4096)
    pointer = pinned.ptr
    del pinned
    gc.collect()
    assert rt.pointer_attributes(pointer).type != rt.MemoryType.HOST


def test_memoryview_keeps_host_buffer_alive():
    pinned = rt.HostBuffer(16)
    pointer = pinned.ptr
    view = memoryview(pinned)
    del pinned
    gc.collect()
    assert rt.pointer_attributes(pointer).type == rt.MemoryType.HOST
    view[:] = b"0123456789abcdef"
    assert bytes(view) == b"0123456789abcdef"


def test_empty_host_buffer():
    pinned = rt.HostBuffer(0)
    assert len(pinned) == 0
    assert memoryview(pinned).nbytes == 0


def test_round_trip_through_device():
    source = rt.HostBuffer(1000)
    memoryview(source)[:] = bytes(i % 251 for i in range(1000))
    destination = rt.HostBuffer(1000)
    with rt.DeviceBuffer(1000, device=1) as device_buffer:
        device_buffer.copy_from(source)
        device_buffer.copy_to(destination)
    assert bytes(destination) == bytes(source)
