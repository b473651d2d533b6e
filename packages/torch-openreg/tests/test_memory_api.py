"""torch.cuda's allocator API on openreg: the per-process memory fraction (enforced),
caching_allocator_alloc/delete, memory_stats_as_nested_dict, pinned host memory
statistics and OutOfMemoryError.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import torch

# Tests here compare exact memory statistics (conftest.py).
pytestmark = pytest.mark.usefixtures("steady_memory_stats")

MiB = 1 << 20


@pytest.fixture(autouse=True)
def _fraction_back_to_one(devices: int) -> Iterator[None]:
    yield
    for index in range(devices):
        torch.openreg.set_per_process_memory_fraction(1.0, index)


# ---- OutOfMemoryError ---------------------------------------------------------------


def test_out_of_memory_error_is_torchs():
    assert torch.openreg.OutOfMemoryError is torch.OutOfMemoryError
    assert issubclass(torch.openreg.OutOfMemoryError, RuntimeError)


# ---- memory fraction ----------------------------------------------------------------


def test_fraction_defaults_to_one(devices: int):
    for index in range(devices):
        assert torch.openreg.get_per_process_memory_fraction(index) == 1.0


def test_fraction_is_per_device():
    torch.openreg.set_per_process_memory_fraction(0.5, "openreg:1")
    assert torch.openreg.get_per_process_memory_fraction(1) == 0.5
    assert torch.openreg.get_per_process_memory_fraction(0) == 1.0
    with torch.openreg.device(1):
        assert torch.openreg.get_per_process_memory_fraction() == 0.5


@pytest.mark.parametrize(
    ("fraction", "error"),
    [(1, TypeError), ("0.5", TypeError), (1.5, ValueError), (-0.1, ValueError)],
)
def test_invalid_fraction_raises(fraction: object, error: type[Exception]):
    with pytest.raises(error, match="fraction"):
        torch.openreg.set_per_process_memory_fraction(fraction)  # type: ignore[arg-type]
    assert torch.openreg.get_per_process_memory_fraction() == 1.0


def test_fraction_rejects_invalid_device():
    with pytest.raises((RuntimeError, ValueError)):
        torch.openreg.set_per_process_memory_fraction(0.5, 9)


FRACTION_SCRIPT = """
import json, torch, torch_openreg

results = {}
torch.openreg.set_per_process_memory_fraction(0.25)  # 16 MiB of 64 MiB
# From 10 MiB a request gets a segment of its own size (smaller ones share 20 MiB
# segments, which a 16 MiB limit refuses, as CUDA's allocator does).
a = torch.empty(10 << 20, dtype=torch.uint8, device="openreg")
results["within"] = torch.openreg.memory_reserved() == 10 << 20
try:
    b = torch.empty(12 << 20, dtype=torch.uint8, device="openreg")
    results["beyond"] = "allocated"
except torch.openreg.OutOfMemoryError as error:
    results["beyond"] = str(error)
results["reserved_after_refusal"] = torch.openreg.memory_reserved()
results["ooms"] = torch.openreg.memory_stats()["num_ooms"]
# Freed memory counts again: the cache is returned before refusing.
del a
c = torch.empty(12 << 20, dtype=torch.uint8, device="openreg")
results["after_free"] = c.numel()
del c
torch.openreg.set_per_process_memory_fraction(1.0)
d = torch.empty(40 << 20, dtype=torch.uint8, device="openreg")
results["raised"] = d.numel()
# Device 1 is not limited by device 0's fraction.
torch.openreg.set_per_process_memory_fraction(0.0, 0)
e = torch.empty(1 << 20, dtype=torch.uint8, device="openreg:1")
results["other_device"] = e.numel()
print(json.dumps(results))
"""


@pytest.mark.child_interpreters
def test_fraction_is_enforced_by_the_allocator(run_python):
    result = run_python(FRACTION_SCRIPT, OPENREG_DEVICE_MEMORY="64MiB")
    assert result.returncode == 0, result.stderr
    results = json.loads(result.stdout.strip().splitlines()[-1])
    assert results["within"] is True
    assert "memory fraction 0.25" in results["beyond"]
    assert "set_per_process_memory_fraction" in results["beyond"]
    assert "16.00 MiB" in results["beyond"]
    assert results["reserved_after_refusal"] <= 16 * MiB
    assert results["ooms"] == 1
    assert results["after_free"] == 12 * MiB
    assert results["raised"] == 40 * MiB
    assert results["other_device"] == MiB


@pytest.mark.child_interpreters
def test_fraction_zero_refuses_every_new_segment(run_python):
    result = run_python(
        """
        import torch, torch_openreg
        torch.openreg.set_per_process_memory_fraction(0.0)
        try:
            torch.ones(4, device="openreg")
        except torch.OutOfMemoryError as error:
            print("refused:", "fraction 0" in str(error))
        """,
        OPENREG_DEVICE_MEMORY="64MiB",
    )
    assert result.returncode == 0, result.stderr
    assert "refused: True" in result.stdout


# ---- caching_allocator_alloc / caching_allocator_delete -------------------------------


def test_raw_allocation_counts_and_frees():
    torch.openreg.synchronize()
    before = torch.openreg.memory_allocated()
    pointer = torch.openreg.caching_allocator_alloc(3 * MiB)
    assert isinstance(pointer, int) and pointer != 0
    assert torch.openreg.memory_allocated() - before == 3 * MiB
    torch.openreg.caching_allocator_delete(pointer)
    assert torch.openreg.memory_allocated() == before


def test_raw_allocation_is_caching_allocator_memory():
    # Freed, the block serves the next allocation of that size on that stream.
    pointer = torch.openreg.caching_allocator_alloc(2 * MiB)
    torch.openreg.caching_allocator_delete(pointer)
    tensor = torch.empty(2 * MiB, dtype=torch.uint8, device="openreg")
    assert tensor.data_ptr() == pointer


def test_raw_allocation_on_a_device_and_stream():
    stream = torch.openreg.Stream(device=1)
    before = torch.openreg.memory_allocated(1)
    pointer = torch.openreg.caching_allocator_alloc(MiB, device=1, stream=stream)
    assert torch.openreg.memory_allocated(1) - before == MiB
    torch.openreg.caching_allocator_delete(pointer)
    # Stream-ordered: that stream's next allocation reuses it, the default stream's does not.
    with torch.openreg.stream(stream):
        same = torch.empty(MiB, dtype=torch.uint8, device="openreg:1")
    assert same.data_ptr() == pointer


def test_raw_allocation_with_default_stream_handle():
    pointer = torch.openreg.caching_allocator_alloc(4096, device=0, stream=0)
    torch.openreg.caching_allocator_delete(pointer)


def test_raw_allocation_rejects_a_stream_of_another_device():
    with pytest.raises(ValueError, match="device 1"):
        torch.openreg.caching_allocator_alloc(4096, device=0, stream=torch.openreg.Stream(device=1))


def test_raw_allocation_rejects_bad_stream_types():
    with pytest.raises(TypeError, match="stream"):
        torch.openreg.caching_allocator_alloc(4096, stream="fast")  # type: ignore[arg-type]


def test_raw_delete_rejects_unknown_and_double_frees():
    pointer = torch.openreg.caching_allocator_alloc(4096)
    torch.openreg.caching_allocator_delete(pointer)
    with pytest.raises(RuntimeError, match="caching_allocator_alloc"):
        torch.openreg.caching_allocator_delete(pointer)
    tensor = torch.ones(1024, device="openreg")
    with pytest.raises(RuntimeError, match="belongs to a tensor"):
        torch.openreg.caching_allocator_delete(tensor.data_ptr())
    assert torch.equal(tensor.cpu(), torch.ones(1024))


def test_raw_allocation_of_zero_bytes():
    assert torch.openreg.caching_allocator_alloc(0) == 0
    torch.openreg.caching_allocator_delete(0)


# ---- memory_stats_as_nested_dict ------------------------------------------------------


def test_nested_stats_agree_with_flat_stats_and_accelerator():
    keep = torch.ones(1000, device="openreg")
    nested = torch.openreg.memory_stats_as_nested_dict()
    flat = torch.openreg.memory_stats()
    assert nested["allocated_bytes"]["all"]["current"] == torch.openreg.memory_allocated()
    assert flat["allocated_bytes.all.current"] == nested["allocated_bytes"]["all"]["current"]
    assert flat["reserved_bytes.large_pool.peak"] == nested["reserved_bytes"]["large_pool"]["peak"]
    accelerator = torch.accelerator.memory_stats(0)
    for key, value in accelerator.items():
        assert flat[key] == value, key
    assert list(flat) == sorted(flat)
    del keep


def test_nested_stats_on_other_device():
    keep = torch.ones(1 << 18, device="openreg:1")
    nested = torch.openreg.memory_stats_as_nested_dict("openreg:1")
    assert nested["allocated_bytes"]["all"]["current"] == torch.openreg.memory_allocated(1)
    del keep


# ---- pinned host memory statistics ----------------------------------------------------

HOST_KEYS = {
    "num_host_alloc",
    "num_host_free",
    *(
        f"{stat}.{field}"
        for stat in ("allocations", "allocated_bytes", "active_requests", "active_bytes")
        for field in ("current", "peak", "allocated", "freed")
    ),
    *(
        f"{stat}.{field}"
        for stat in ("host_alloc_time", "host_free_time")
        for field in ("total", "max", "min", "count", "avg")
    ),
}


def test_host_stats_have_cudas_keys():
    assert set(torch.openreg.host_memory_stats()) == HOST_KEYS
    nested = torch.openreg.host_memory_stats_as_nested_dict()
    assert (
        nested["allocations"]["current"] == torch.openreg.host_memory_stats()["allocations.current"]
    )


def test_host_stats_follow_pinned_allocations():
    torch.accelerator.empty_host_cache()
    torch.openreg.reset_accumulated_host_memory_stats()
    before = torch.openreg.host_memory_stats()
    pinned = torch.empty(300_000, dtype=torch.uint8).pin_memory()  # rounds up to 512 KiB
    during = torch.openreg.host_memory_stats()
    assert during["active_requests.current"] - before["active_requests.current"] == 1
    assert during["active_bytes.current"] - before["active_bytes.current"] == 1 << 19
    assert during["num_host_alloc"] == 1
    assert during["allocated_bytes.allocated"] == 1 << 19
    assert during["host_alloc_time.count"] == 1
    del pinned
    after = torch.openreg.host_memory_stats()
    assert after["active_requests.current"] == before["active_requests.current"]
    # Cached, not returned: still owned until empty_host_cache.
    assert after["allocations.current"] == during["allocations.current"]
    torch.accelerator.empty_host_cache()
    emptied = torch.openreg.host_memory_stats()
    assert emptied["allocations.current"] == 0
    assert emptied["num_host_free"] >= 1
    assert emptied["allocated_bytes.freed"] >= 1 << 19
    assert emptied["host_free_time.count"] == emptied["num_host_free"]


def test_host_peak_reset():
    torch.accelerator.empty_host_cache()
    big = torch.empty(1 << 20, dtype=torch.uint8).pin_memory()
    del big
    torch.accelerator.empty_host_cache()
    assert torch.openreg.host_memory_stats()["allocated_bytes.peak"] >= 1 << 20
    torch.openreg.reset_peak_host_memory_stats()
    stats = torch.openreg.host_memory_stats()
    assert stats["allocated_bytes.peak"] == stats["allocated_bytes.current"] == 0


def test_host_accumulated_reset_keeps_current_values():
    keep = torch.empty(4096, dtype=torch.uint8).pin_memory()
    torch.openreg.reset_accumulated_host_memory_stats()
    stats = torch.openreg.host_memory_stats()
    assert stats["num_host_alloc"] == stats["num_host_free"] == 0
    assert stats["allocations.allocated"] == stats["allocations.freed"] == 0
    assert stats["host_alloc_time.count"] == stats["host_alloc_time.total"] == 0
    assert stats["active_requests.current"] >= 1
    del keep
