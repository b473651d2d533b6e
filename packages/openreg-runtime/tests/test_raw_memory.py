"""Raw allocation API: malloc/free, malloc_host/free_host, memset, mem_get_info."""

import ctypes
import itertools

import pytest

import openreg_runtime as rt


@pytest.mark.parametrize("size", [1, 100, 4095, 4096, 4097, 1 << 20, (1 << 20) + 1])
def test_malloc_returns_page_aligned_address_and_accounts_page_rounded_size(
    size, page_round, device_memory
):
    free_before, total = rt.mem_get_info()
    pointer = device_memory(size)
    assert isinstance(pointer, int)
    assert pointer != 0
    assert page_round(pointer) == pointer, "device allocations are page-granular"
    free_during, total_during = rt.mem_get_info()
    assert total_during == total
    assert free_before - free_during == page_round(size)
    rt.free(pointer)
    assert rt.mem_get_info() == (free_before, total)


def test_mem_get_info_total_is_constant_and_free_never_exceeds_it(device_count):
    for index in range(device_count):
        free, total = rt.mem_get_info(device=index)
        assert 0 < free <= total


@pytest.mark.parametrize("device", [0, 1])
def test_malloc_on_one_device_leaves_the_other_untouched(device, device_count, device_memory):
    before = [rt.mem_get_info(device=i) for i in range(device_count)]
    pointer = device_memory(8192, device=device)
    after = [rt.mem_get_info(device=i) for i in range(device_count)]
    for index in range(device_count):
        expected = before[index][0] - (8192 if index == device else 0)
        assert after[index][0] == expected
    assert rt.pointer_attributes(pointer).device == device
    assert rt.current_device() == 0


def test_malloc_uses_current_device(device_memory):
    with rt.device(1):
        pointer = device_memory(64)
    assert rt.pointer_attributes(pointer).device == 1


def test_distinct_allocations_do_not_overlap(device_memory, page_round):
    pointers = sorted(device_memory(5000) for _ in range(8))
    for first, second in itertools.pairwise(pointers):
        assert second - first >= page_round(5000)


def test_malloc_zero_returns_null_and_reserves_nothing():
    before = rt.mem_get_info()
    assert rt.malloc(0) == 0
    assert rt.mem_get_info() == before


def test_free_null_is_a_no_op():
    before = rt.mem_get_info()
    rt.free(0)
    assert rt.mem_get_info() == before


def test_double_free_raises_invalid_device_pointer():
    pointer = rt.malloc(4096)
    rt.free(pointer)
    with pytest.raises(rt.InvalidDevicePointerError, match="is not a live allocation") as info:
        rt.free(pointer)
    assert "already freed" in str(info.value)
    assert hex(pointer) in str(info.value)


def test_free_of_interior_pointer_is_rejected_and_allocation_survives():
    free_before = rt.mem_get_info()[0]
    pointer = rt.malloc(3 * 4096)
    with pytest.raises(rt.InvalidDevicePointerError, match="inside") as info:
        rt.free(pointer + 100)
    assert "points inside an allocation" in str(info.value)
    assert "pass the pointer orMalloc returned" in str(info.value)
    # The allocation is untouched and can still be freed through its base.
    assert rt.pointer_attributes(pointer).type == rt.MemoryType.DEVICE
    rt.free(pointer)
    assert rt.mem_get_info()[0] == free_before


def test_free_of_pageable_host_pointer_is_rejected():
    host = ctypes.create_string_buffer(64)
    with pytest.raises(rt.InvalidDevicePointerError, match="is not OpenReg device memory"):
        rt.free(ctypes.addressof(host))


def test_free_of_pinned_host_pointer_points_to_free_host(pinned_memory):
    pointer = pinned_memory(64)
    with pytest.raises(rt.InvalidDevicePointerError, match="freed with orFreeHost"):
        rt.free(pointer)
    # Still a live pinned allocation.
    assert rt.pointer_attributes(pointer).type == rt.MemoryType.HOST


def test_malloc_host_returns_usable_host_memory():
    size = 10_000
    pointer = rt.malloc_host(size)
    try:
        assert isinstance(pointer, int)
        assert pointer != 0
        pattern = bytes(range(256)) * 39 + bytes(16)
        ctypes.memmove(pointer, pattern, size)
        assert ctypes.string_at(pointer, size) == pattern
    finally:
        rt.free_host(pointer)


def test_malloc_host_does_not_use_device_memory():
    before = rt.mem_get_info()
    pointer = rt.malloc_host(1 << 20)
    assert rt.mem_get_info() == before
    rt.free_host(pointer)


def test_malloc_host_zero_and_free_host_null():
    assert rt.malloc_host(0) == 0
    rt.free_host(0)


def test_double_free_host_raises_invalid_host_pointer():
    pointer = rt.malloc_host(128)
    rt.free_host(pointer)
    with pytest.raises(rt.InvalidHostPointerError, match="is not a live orMallocHost allocation"):
        rt.free_host(pointer)


def test_free_host_of_interior_pointer_is_rejected(pinned_memory):
    pointer = pinned_memory(128)
    with pytest.raises(rt.InvalidHostPointerError, match="interior pointer"):
        rt.free_host(pointer + 8)


def test_free_host_of_device_pointer_is_rejected(device_memory):
    pointer = device_memory(128)
    with pytest.raises(rt.InvalidHostPointerError, match="is not a live orMallocHost allocation"):
        rt.free_host(pointer)


def test_free_host_of_pageable_pointer_is_rejected():
    host = ctypes.create_string_buffer(64)
    with pytest.raises(rt.InvalidHostPointerError, match="is not a live orMallocHost allocation"):
        rt.free_host(ctypes.addressof(host))


def test_memset_fills_device_memory(device_memory):
    pointer = device_memory(4096)
    rt.memset(pointer, 0x5A, 4096)
    rt.memset(pointer + 100, 0x01, 10)
    host = ctypes.create_string_buffer(4096)
    rt.memcpy(ctypes.addressof(host), pointer, 4096, rt.MemcpyKind.DEVICE_TO_HOST)
    expected = b"\x5a" * 100 + b"\x01" * 10 + b"\x5a" * (4096 - 110)
    assert host.raw == expected


def test_memset_beyond_allocation_is_rejected(device_memory):
    pointer = device_memory(4096)
    with pytest.raises(rt.InvalidValueError, match="overruns its 4096-byte allocation"):
        rt.memset(pointer + 10, 0, 4096)


def test_memset_of_host_memory_is_rejected():
    host = ctypes.create_string_buffer(16)
    with pytest.raises(rt.InvalidMemcpyDirectionError, match="is not device memory"):
        rt.memset(ctypes.addressof(host), 0, 16)


def test_memset_null_with_nonzero_count_is_rejected():
    with pytest.raises(rt.InvalidValueError, match="memset of 16 bytes at NULL"):
        rt.memset(0, 0, 16)
