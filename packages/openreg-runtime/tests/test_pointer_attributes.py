"""pointer_attributes: device, pinned host, pageable and freed pointers."""

import array
import ctypes

import pytest

import openreg_runtime as rt


@pytest.mark.parametrize("device", [0, 1])
@pytest.mark.parametrize("offset", [0, 1, 4096, 9999])
def test_device_pointer_attributes(device, offset, device_memory, page_round):
    base = device_memory(10_000, device=device)
    attributes = rt.pointer_attributes(base + offset)
    assert isinstance(attributes, rt.PointerAttributes)
    assert attributes.type == rt.MemoryType.DEVICE
    assert attributes.device == device
    assert attributes.device_pointer == base + offset
    assert attributes.host_pointer == 0
    assert attributes.allocation_base == base
    assert attributes.allocation_size == page_round(10_000)


def test_device_pointer_in_rounding_slack_belongs_to_the_allocation(device_memory, page_round):
    base = device_memory(10)
    attributes = rt.pointer_attributes(base + page_round(10) - 1)
    assert attributes.type == rt.MemoryType.DEVICE
    assert attributes.allocation_base == base


def test_device_buffer_pointer_attributes():
    with rt.DeviceBuffer(300, device=1) as buffer:
        attributes = rt.pointer_attributes(buffer.ptr + 299)
        assert attributes.type == rt.MemoryType.DEVICE
        assert attributes.device == 1
        assert attributes.allocation_base == buffer.ptr


@pytest.mark.parametrize("offset", [0, 17, 499])
def test_pinned_host_pointer_attributes(offset, pinned_memory):
    base = pinned_memory(500)
    attributes = rt.pointer_attributes(base + offset)
    assert attributes.type == rt.MemoryType.HOST
    assert attributes.device == -1
    assert attributes.device_pointer == 0
    assert attributes.host_pointer == base + offset
    assert attributes.allocation_base == base
    assert attributes.allocation_size == 500


def test_host_buffer_pointer_attributes():
    buffer = rt.HostBuffer(64)
    attributes = rt.pointer_attributes(buffer.ptr)
    assert attributes.type == rt.MemoryType.HOST
    assert attributes.allocation_size == 64


@pytest.mark.parametrize(
    "make_buffer",
    [
        pytest.param(lambda: ctypes.create_string_buffer(64), id="ctypes"),
        pytest.param(lambda: bytearray(64), id="bytearray"),
        pytest.param(lambda: array.array("d", [0.0] * 8), id="array"),
    ],
)
def test_pageable_host_pointer_is_unregistered(make_buffer, address_of):
    buffer = make_buffer()
    pointer = address_of(buffer)
    attributes = rt.pointer_attributes(pointer)
    assert attributes.type == rt.MemoryType.UNREGISTERED
    assert attributes.device == -1
    assert attributes.device_pointer == 0
    assert attributes.host_pointer == 0
    assert attributes.allocation_base == 0
    assert attributes.allocation_size == 0


def test_null_pointer_is_unregistered():
    attributes = rt.pointer_attributes(0)
    assert attributes.type == rt.MemoryType.UNREGISTERED
    assert attributes.device == -1


@pytest.mark.parametrize("offset", [0, 64])
def test_freed_device_pointer_is_rejected(offset):
    pointer = rt.malloc(4096, device=1)
    rt.free(pointer)
    with pytest.raises(rt.InvalidDevicePointerError, match="not in a live allocation") as info:
        rt.pointer_attributes(pointer + offset)
    assert "device 1" in str(info.value)


def test_freed_pinned_pointer_becomes_unregistered():
    pointer = rt.malloc_host(64)
    rt.free_host(pointer)
    assert rt.pointer_attributes(pointer).type != rt.MemoryType.HOST


def test_memory_type_values_match_the_c_enum():
    assert int(rt.MemoryType.UNREGISTERED) == 0
    assert int(rt.MemoryType.HOST) == 1
    assert int(rt.MemoryType.DEVICE) == 2
