"""Pinned host memory, device memory statistics, and out-of-memory errors.

The device allocator caches, like CUDA's: a tensor's block is its byte size
rounded up to 512 bytes (``memory_allocated``), carved from segments the
allocator reserves from the runtime (``memory_reserved``: 2 MiB segments for
blocks up to 1 MiB, 20 MiB ones for blocks below 10 MiB); freed blocks stay
reserved until ``empty_cache()``. Statistics move by exact amounts under
these rules (see also test_caching_allocator.py for exact stats in a fresh
process).
"""

from __future__ import annotations

import gc

import pytest
import torch

# Tests here compare exact memory statistics (conftest.py).
pytestmark = pytest.mark.usefixtures("steady_memory_stats")

MiB = 1 << 20


def block(nbytes: int) -> int:
    """Bytes the caching allocator accounts for a tensor of ``nbytes``."""
    return max(512, -(-nbytes // 512) * 512)


def _leave_in_a_cycle(tensor: torch.Tensor) -> None:
    cycle: list[object] = [tensor]
    cycle.append(cycle)


def test_the_collector_frees_nothing_in_the_middle_of_a_test():
    # What steady_memory_stats guards against: garbage freed while a test compares figures.
    before = torch.openreg.memory_allocated()
    _leave_in_a_cycle(torch.ones(128, device="openreg"))
    for _ in range(100):
        [[] for _ in range(1000)]  # enough new containers to start collections
    assert torch.openreg.memory_allocated() == before + 512
    gc.collect()
    assert torch.openreg.memory_allocated() == before


# --- pinned memory ---------------------------------------------------------------------


def test_pin_memory_makes_pinned_cpu_copy():
    source = torch.arange(10.0)
    pinned = source.pin_memory()
    assert pinned.is_pinned()
    assert pinned.device == torch.device("cpu")
    assert not source.is_pinned()
    assert pinned.data_ptr() != source.data_ptr()
    torch.testing.assert_close(pinned, source, rtol=0, atol=0)


def test_pin_memory_of_pinned_tensor_returns_it():
    pinned = torch.arange(4.0).pin_memory()
    assert pinned.pin_memory() is pinned


def test_views_of_pinned_tensor_are_pinned_and_clones_are_not():
    pinned = torch.arange(10.0).pin_memory()
    assert pinned[2:].is_pinned()
    assert not pinned.clone().is_pinned()


def test_empty_with_pin_memory_true():
    assert torch.empty(16, pin_memory=True).is_pinned()
    assert torch.zeros(2, 3, pin_memory=True).is_pinned()


def test_openreg_tensor_is_not_pinned():
    assert not torch.ones(3, device="openreg").is_pinned()


def test_pin_memory_of_openreg_tensor_raises():
    with pytest.raises(RuntimeError, match="only dense CPU tensors can be pinned"):
        torch.ones(3, device="openreg").pin_memory()


def test_openreg_factory_with_pin_memory_raises():
    with pytest.raises(RuntimeError, match="Only dense CPU tensors can be pinned"):
        torch.empty(3, device="openreg", pin_memory=True)


def test_non_blocking_copies_through_pinned_memory():
    source = torch.randn(1000, generator=torch.Generator().manual_seed(0)).pin_memory()
    on_device = torch.empty(1000, device="openreg:1")
    on_device.copy_(source, non_blocking=True)
    back = torch.empty(1000).pin_memory()
    back.copy_(on_device, non_blocking=True)
    torch.openreg.synchronize(1)
    torch.testing.assert_close(back, source, rtol=0, atol=0)


def test_dataloader_pin_memory():
    dataset = torch.utils.data.TensorDataset(torch.arange(8.0))
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, pin_memory=True)
    (batch,) = next(iter(loader))
    assert batch.is_pinned()
    torch.testing.assert_close(batch.to("openreg").cpu(), torch.arange(4.0), rtol=0, atol=0)


# --- statistics -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "dtype", "nbytes"),
    [
        ((1000,), torch.float32, 4000),
        ((3,), torch.uint8, 3),
        ((7, 9), torch.float64, 504),
        ((5,), torch.complex128, 80),
        ((MiB,), torch.int16, 2 * MiB),
    ],
)
@pytest.mark.parametrize("device", [0, 1])
def test_allocation_delta_is_exact(shape, dtype, nbytes, device):
    before = torch.openreg.memory_allocated(device)
    other_before = torch.openreg.memory_allocated(1 - device)
    tensor = torch.empty(shape, dtype=dtype, device=f"openreg:{device}")
    assert torch.openreg.memory_allocated(device) - before == block(nbytes)
    assert torch.accelerator.memory_allocated(device) - before == block(nbytes)
    assert torch.openreg.memory_reserved(device) >= torch.openreg.memory_allocated(device)
    assert torch.openreg.memory_allocated(1 - device) == other_before
    reserved = torch.openreg.memory_reserved(device)
    del tensor
    assert torch.openreg.memory_allocated(device) == before
    assert torch.openreg.memory_reserved(device) == reserved  # cached, not returned


def test_memory_functions_accept_device_forms():
    tensor = torch.empty(100, dtype=torch.uint8, device="openreg:1")
    expected = torch.accelerator.memory_allocated(1)
    assert expected >= 100
    assert torch.openreg.memory_allocated(1) == expected
    assert torch.openreg.memory_allocated("openreg:1") == expected
    assert torch.openreg.memory_allocated(torch.device("openreg:1")) == expected
    with torch.openreg.device(1):
        assert torch.openreg.memory_allocated() == expected
    del tensor


def test_empty_tensor_allocates_nothing():
    before = torch.openreg.memory_allocated()
    tensor = torch.empty(0, 5, device="openreg")
    assert torch.openreg.memory_allocated() == before
    del tensor


def test_views_allocate_nothing():
    base = torch.empty(1000, device="openreg")
    before = torch.openreg.memory_allocated()
    views = [base.view(10, 100), base[::2], base.view(10, 100).t(), base.unsqueeze(0)]
    assert torch.openreg.memory_allocated() == before
    del views


def test_kernel_outputs_are_device_allocations():
    a = torch.randn(1000, device="openreg")
    b = torch.randn(1000, device="openreg")
    torch.openreg.synchronize()
    before = torch.openreg.memory_allocated()
    total = a + b
    torch.openreg.synchronize()  # kernel temporaries, if any, are gone
    assert torch.openreg.memory_allocated() - before == block(4000)
    reduced = a.sum()
    torch.openreg.synchronize()
    assert torch.openreg.memory_allocated() - before == block(4000) + block(4)
    del total, reduced
    assert torch.openreg.memory_allocated() == before


def test_scalar_operands_inside_kernels_are_not_device_allocations():
    # x.mul_(0.5) casts its wrapped scalar (a double) to float inside the kernel; an
    # optimizer's foreach kernels do that for every parameter. Such single elements stay
    # on the host, as CUDA keeps scalar operands (docs/memory-model.md).
    x = torch.ones(1000, device="openreg")
    params = [torch.ones(10, device="openreg") for _ in range(4)]
    step = lambda: (x.mul_(0.5), torch._foreach_mul_(params, 0.5))  # noqa: E731
    step()
    torch.openreg.synchronize()
    before = torch.openreg.memory_stats()["allocation.all.allocated"]
    for _ in range(3):
        step()
    torch.openreg.synchronize()
    assert torch.openreg.memory_stats()["allocation.all.allocated"] == before
    torch.testing.assert_close(x.cpu(), torch.full((1000,), 0.5**4))
    torch.testing.assert_close(params[0].cpu(), torch.full((10,), 0.5**4))


def test_a_one_element_result_of_a_synchronous_kernel_is_device_memory():
    a = torch.randn(97, device="openreg")  # a size of its own: a new signature
    torch.openreg.synchronize()
    before = torch.openreg.memory_allocated()
    total = a.sum(dtype=torch.float64)  # first call of its signature: runs synchronously
    assert total.device.type == "openreg"
    assert torch.openreg.memory_allocated() - before == block(8)
    torch.testing.assert_close(total.cpu(), a.cpu().sum(dtype=torch.float64))
    del total


def test_kernel_outputs_count_on_their_device():
    a = torch.randn(500, device="openreg:1")
    before0 = torch.openreg.memory_allocated(0)
    before1 = torch.openreg.memory_allocated(1)
    result = a * 2  # current device is 0; the kernel runs on device 1
    torch.openreg.synchronize(1)
    assert torch.openreg.memory_allocated(1) - before1 == block(2000)
    assert torch.openreg.memory_allocated(0) == before0
    del result


def test_copy_to_cpu_frees_nothing_and_allocates_nothing_on_device():
    tensor = torch.randn(256, device="openreg")
    before = torch.openreg.memory_allocated()
    host = tensor.cpu()
    assert torch.openreg.memory_allocated() == before
    assert host.device == torch.device("cpu")


def test_resize_accounting():
    tensor = torch.empty(100, device="openreg")
    before = torch.openreg.memory_allocated()
    tensor.resize_(200)
    torch.openreg.synchronize()  # the old block is released after the copy of its contents
    assert torch.openreg.memory_allocated() - before == block(800) - block(400)
    del tensor
    assert torch.openreg.memory_allocated() == before - block(400)


def test_freeing_returns_to_baseline():
    baseline = torch.openreg.memory_allocated()
    tensors = [torch.empty(n, device="openreg") for n in (10, 1000, 12345)]
    expected = block(4 * 10) + block(4 * 1000) + block(4 * 12345)
    assert torch.openreg.memory_allocated() - baseline == expected
    tensors.clear()
    assert torch.openreg.memory_allocated() == baseline


def test_max_memory_allocated_and_reset_peak():
    torch.openreg.synchronize()
    torch.openreg.empty_cache()
    torch.openreg.reset_peak_memory_stats()
    baseline = torch.openreg.memory_allocated()
    baseline_reserved = torch.openreg.memory_reserved()
    assert torch.openreg.max_memory_allocated() == baseline
    big = torch.empty(2 * MiB, dtype=torch.uint8, device="openreg")  # a 20 MiB segment
    del big
    small = torch.empty(MiB, dtype=torch.uint8, device="openreg")  # a 2 MiB segment
    assert torch.openreg.max_memory_allocated() - baseline == 2 * MiB
    assert torch.openreg.max_memory_reserved() - baseline_reserved == 22 * MiB
    assert torch.accelerator.max_memory_allocated(0) - baseline == 2 * MiB
    torch.openreg.reset_peak_memory_stats()
    assert torch.openreg.max_memory_allocated() - baseline == MiB
    del small
    assert torch.openreg.max_memory_allocated() - baseline == MiB


def test_reset_peak_is_per_device():
    on_one = torch.empty(MiB, dtype=torch.uint8, device="openreg:1")
    del on_one
    peak1 = torch.openreg.max_memory_allocated(1)
    torch.openreg.reset_peak_memory_stats(0)
    assert torch.openreg.max_memory_allocated(1) == peak1
    torch.openreg.reset_peak_memory_stats(1)
    assert torch.openreg.max_memory_allocated(1) == torch.openreg.memory_allocated(1)


def test_memory_stats_agree_with_memory_allocated():
    tensor = torch.empty(3000, dtype=torch.uint8, device="openreg")
    stats = torch.openreg.memory_stats()
    allocated = torch.openreg.memory_allocated()
    assert stats["allocated_bytes.all.current"] == allocated
    assert stats["reserved_bytes.all.current"] == torch.openreg.memory_reserved()
    assert stats["active_bytes.all.current"] == allocated
    assert stats == torch.accelerator.memory_stats(0)
    del tensor


def test_memory_stats_count_allocations():
    before = torch.openreg.memory_stats(1)
    tensors = [torch.empty(10, device="openreg:1") for _ in range(3)]
    during = torch.openreg.memory_stats(1)
    assert during["allocation.all.current"] - before["allocation.all.current"] == 3
    assert during["allocation.small_pool.current"] - before["allocation.small_pool.current"] == 3
    allocated = during["allocated_bytes.all.allocated"] - before["allocated_bytes.all.allocated"]
    assert allocated == 3 * block(40)
    assert during["requested_bytes.all.current"] - before["requested_bytes.all.current"] == 120
    tensors.clear()
    after = torch.openreg.memory_stats(1)
    assert after["allocation.all.current"] == before["allocation.all.current"]
    assert after["allocated_bytes.all.freed"] - before["allocated_bytes.all.freed"] == 3 * block(40)
    assert after["num_device_free"] == before["num_device_free"]  # cached, not returned


def test_reset_accumulated_memory_stats():
    tensor = torch.empty(10, device="openreg")
    del tensor
    assert torch.openreg.memory_stats()["num_device_alloc"] > 0
    torch.openreg.reset_accumulated_memory_stats()
    stats = torch.openreg.memory_stats()
    assert stats["num_device_alloc"] == 0
    assert stats["num_device_free"] == 0
    assert stats["allocated_bytes.all.allocated"] == 0
    assert stats["allocated_bytes.all.current"] == torch.openreg.memory_allocated()


def test_empty_cache_keeps_live_memory():
    tensor = torch.ones(100, device="openreg")
    before = torch.openreg.memory_allocated()
    torch.openreg.empty_cache()
    assert torch.openreg.memory_allocated() == before
    torch.testing.assert_close(tensor.cpu(), torch.ones(100), rtol=0, atol=0)


def test_mem_get_info_tracks_reservations():
    torch.openreg.synchronize()
    torch.openreg.empty_cache()
    free_before, total = torch.openreg.mem_get_info(0)
    assert 0 < free_before <= total
    tensor = torch.empty(12 * MiB, dtype=torch.uint8, device="openreg")  # its own segment
    free_during, total_during = torch.openreg.mem_get_info(0)
    assert total_during == total
    assert free_before - free_during == 12 * MiB
    assert torch.openreg.mem_get_info() == (free_during, total)
    assert torch.openreg.mem_get_info("openreg:0") == (free_during, total)
    assert torch.accelerator.get_memory_info(0) == (free_during, total)
    del tensor
    assert torch.openreg.mem_get_info(0) == (free_during, total)  # still cached
    torch.openreg.empty_cache()
    assert torch.openreg.mem_get_info(0) == (free_before, total)


def test_mem_get_info_is_per_device():
    free1, _ = torch.openreg.mem_get_info(1)
    tensor = torch.empty(MiB, dtype=torch.uint8, device="openreg:0")
    assert torch.openreg.mem_get_info(1)[0] == free1
    del tensor


@pytest.mark.parametrize(
    "call",
    [
        torch.openreg.memory_allocated,
        torch.openreg.memory_stats,
        torch.openreg.mem_get_info,
        torch.openreg.reset_peak_memory_stats,
    ],
)
def test_memory_functions_reject_invalid_device(call):
    with pytest.raises(RuntimeError, match=r"valid indices 0\.\.1"):
        call(2)


# --- out of memory -----------------------------------------------------------------------


def test_out_of_memory(run_python):
    result = run_python(
        """
        import torch, torch_openreg
        print("total", torch.openreg.mem_get_info(0)[1])
        try:
            torch.empty(128 << 20, dtype=torch.uint8, device="openreg")
        except torch.OutOfMemoryError as error:
            print("oom", isinstance(error, RuntimeError), str(error).replace("\\n", " "))
        print("allocated", torch.openreg.memory_allocated(0))
        # Allocation still works afterwards, up to the full capacity.
        x = torch.ones(1 << 20, device="openreg")
        print("sum", x.sum().item())
        del x
        y = torch.ones(64 << 20, dtype=torch.uint8, device="openreg")
        print("full", y[-1].item())
        del y
        # Device 1 has its own capacity, and its OOM names it.
        kept = torch.empty(48 << 20, dtype=torch.uint8, device="openreg:1")
        try:
            torch.empty(32 << 20, dtype=torch.uint8, device="openreg:1")
        except torch.OutOfMemoryError as error:
            print("oom1", str(error).replace("\\n", " "))
        """,
        OPENREG_DEVICE_MEMORY="64MiB",
    )
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert lines["total"] == str(64 * MiB)
    oom = lines["oom"]
    assert oom.startswith("True ")  # torch.OutOfMemoryError is a RuntimeError
    assert "device 0" in oom
    assert "OPENREG_DEVICE_MEMORY" in oom
    assert str(128 * MiB) in oom
    assert lines["allocated"] == "0"
    assert lines["sum"] == str(float(MiB))
    assert lines["full"] == "1"
    assert "device 1" in lines["oom1"]


@pytest.mark.child_interpreters
def test_pinned_out_of_memory_names_the_sizes_and_the_fix(run_python):
    result = run_python(
        """
        import torch, torch_openreg
        try:
            torch.empty(1 << 46, dtype=torch.uint8, pin_memory=True)
        except torch.OutOfMemoryError as error:
            print(error)
        """
    )
    assert result.returncode == 0, result.stderr
    message = result.stdout
    assert "openreg out of pinned host memory: tried to allocate 64.00 TiB" in message, message
    assert "the host has" in message and "available" in message, message
    assert "pin_memory=False" in message, message
