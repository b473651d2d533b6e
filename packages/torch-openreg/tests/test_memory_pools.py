"""torch.openreg.MemPool and use_mem_pool, with torch.cuda.MemPool's semantics.

Allocations made in a use_mem_pool scope come from the pool's own segments,
which serve nothing else; the pool lives while a MemPool object or a scope uses
it; when the last one goes, its unused memory returns to the device, and memory
still allocated from it returns with the next empty_cache() once freed.
"""

from __future__ import annotations

import json
import threading

import pytest
import torch

# Tests here compare exact memory statistics (conftest.py).
pytestmark = pytest.mark.usefixtures("steady_memory_stats")

MiB = 1 << 20


def _pool_reserved(pool: torch.openreg.MemPool, device: int = 0) -> int:
    pools = torch.openreg.memory_stats_as_nested_dict(device)["reserved_bytes_by_private_pools"]
    return pools[pool.id]["all"]["current"] if pool.id in pools else 0


def _known_pools(device: int = 0) -> set[tuple[int, int]]:
    return set(torch.openreg.memory_stats_as_nested_dict(device)["reserved_bytes_by_private_pools"])


def test_pool_ids_are_distinct_and_not_the_default_pool():
    first, second = torch.openreg.MemPool(), torch.openreg.MemPool()
    assert first.id != second.id
    for pool in (first, second):
        assert isinstance(pool.id, tuple) and pool.id[0] == 0 and pool.id[1] > 0


def test_use_count_counts_objects_and_scopes():
    pool = torch.openreg.MemPool()
    assert pool.use_count() == 1
    with torch.openreg.use_mem_pool(pool):
        assert pool.use_count() == 2
        with torch.openreg.use_mem_pool(pool):
            assert pool.use_count() == 3
    assert pool.use_count() == 1


def test_allocations_in_the_scope_come_from_the_pool():
    pool = torch.openreg.MemPool()
    outside_before = torch.openreg.memory_reserved()
    with torch.openreg.use_mem_pool(pool):
        inside = torch.empty(3 * MiB, dtype=torch.uint8, device="openreg")
    assert _pool_reserved(pool) >= 3 * MiB
    reserved_by_pool = _pool_reserved(pool)
    outside = torch.empty(3 * MiB, dtype=torch.uint8, device="openreg")
    assert _pool_reserved(pool) == reserved_by_pool
    assert torch.openreg.memory_reserved() >= outside_before + reserved_by_pool
    del inside, outside


def test_pool_blocks_serve_only_the_pool():
    pool = torch.openreg.MemPool()
    with torch.openreg.use_mem_pool(pool):
        first = torch.empty(MiB, dtype=torch.uint8, device="openreg")
    address = first.data_ptr()
    del first
    outside = torch.empty(MiB, dtype=torch.uint8, device="openreg")
    assert outside.data_ptr() != address
    with torch.openreg.use_mem_pool(pool):
        again = torch.empty(MiB, dtype=torch.uint8, device="openreg")
    assert again.data_ptr() == address
    del outside, again


@pytest.mark.parametrize(
    ("operation", "reference"),
    [
        pytest.param(lambda x: x * 2 + 1, lambda x: x * 2 + 1, id="queued"),
        pytest.param(
            lambda x: torch.nonzero(x > 0), lambda x: torch.nonzero(x > 0), id="synchronous"
        ),
        pytest.param(lambda x: x.to("openreg:0", copy=True), lambda x: x, id="copy"),
    ],
)
def test_operator_results_in_the_scope_come_from_the_pool(operation, reference):
    x = torch.randn(256, 256, generator=torch.Generator().manual_seed(0)).to("openreg")
    pool = torch.openreg.MemPool()
    with torch.openreg.use_mem_pool(pool):
        result = operation(x)
    assert torch.equal(result.cpu(), reference(x.cpu()))
    # Dropped, the pool stays known only while memory allocated from it lives:
    # here, only the result can be.
    pool_id = pool.id
    del pool
    assert pool_id in _known_pools()
    del result
    torch.openreg.empty_cache()
    assert pool_id not in _known_pools()


def test_dropping_the_pool_returns_its_memory():
    torch.openreg.synchronize()
    torch.openreg.empty_cache()
    baseline = torch.openreg.memory_reserved()
    pool = torch.openreg.MemPool()
    with torch.openreg.use_mem_pool(pool):
        tensor = torch.ones(5 * MiB, dtype=torch.uint8, device="openreg")
    assert torch.openreg.memory_reserved() > baseline
    pool_id = pool.id
    del tensor
    assert torch.openreg.memory_reserved() > baseline  # cached by the pool
    del pool
    assert torch.openreg.memory_reserved() == baseline
    assert pool_id not in _known_pools()


def test_memory_allocated_from_a_dropped_pool_stays_valid_until_freed():
    torch.openreg.synchronize()
    torch.openreg.empty_cache()
    baseline = torch.openreg.memory_reserved()
    pool = torch.openreg.MemPool()
    with torch.openreg.use_mem_pool(pool):
        survivor = torch.arange(1000, device="openreg")
    pool_id = pool.id
    del pool
    assert torch.equal((survivor * 2).cpu(), torch.arange(1000) * 2)
    assert pool_id in _known_pools()
    del survivor
    torch.openreg.empty_cache()
    assert torch.openreg.memory_reserved() == baseline
    assert pool_id not in _known_pools()


def test_scope_is_per_thread():
    pool = torch.openreg.MemPool()
    addresses: list[int] = []

    def allocate_elsewhere() -> None:
        addresses.append(torch.empty(MiB, dtype=torch.uint8, device="openreg").data_ptr())

    with torch.openreg.use_mem_pool(pool):
        inside = torch.empty(MiB, dtype=torch.uint8, device="openreg")
        reserved = _pool_reserved(pool)
        thread = threading.Thread(target=allocate_elsewhere)
        thread.start()
        thread.join()
    assert _pool_reserved(pool) == reserved
    del inside


def test_nested_scopes_innermost_wins():
    outer, inner = torch.openreg.MemPool(), torch.openreg.MemPool()
    with torch.openreg.use_mem_pool(outer):
        a = torch.empty(MiB, dtype=torch.uint8, device="openreg")
        with torch.openreg.use_mem_pool(inner):
            b = torch.empty(MiB, dtype=torch.uint8, device="openreg")
        c = torch.empty(4 * MiB, dtype=torch.uint8, device="openreg")
    assert _pool_reserved(inner) == 2 * MiB  # one small segment: b
    assert _pool_reserved(outer) > 2 * MiB  # a's small segment and c's large one
    assert "Allocated memory" in torch.openreg.memory_summary()
    del a, b, c


def test_scope_on_another_device():
    pool = torch.openreg.MemPool()
    with torch.openreg.use_mem_pool(pool, device="openreg:1"):
        on_one = torch.empty(MiB, dtype=torch.uint8, device="openreg:1")
        on_zero = torch.empty(MiB, dtype=torch.uint8, device="openreg:0")
    assert _pool_reserved(pool, 1) == 2 * MiB
    assert _pool_reserved(pool, 0) == 0
    del on_one, on_zero


def test_no_split_gives_each_allocation_its_own_segment():
    split, no_split = torch.openreg.MemPool(), torch.openreg.MemPool(no_split=True)
    kept = []
    for pool in (split, no_split):
        with torch.openreg.use_mem_pool(pool):
            kept += [torch.empty(4096, dtype=torch.uint8, device="openreg") for _ in range(2)]
    assert _pool_reserved(split) == 2 * MiB
    assert _pool_reserved(no_split) == 4 * MiB


def test_training_step_in_a_pool_matches_cpu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    inputs = torch.randn(8, 16)
    reference = [p.detach().clone() for p in model.parameters()]
    cpu_loss = model(inputs).square().mean()
    cpu_loss.backward()
    cpu_grads = [p.grad.clone() for p in model.parameters()]

    device_model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)
    )
    with torch.no_grad():
        for target, source in zip(device_model.parameters(), reference, strict=True):
            target.copy_(source)
    pool = torch.openreg.MemPool()
    with torch.openreg.use_mem_pool(pool):
        device_model.to("openreg")
        loss = device_model(inputs.to("openreg")).square().mean()
        loss.backward()
    assert _pool_reserved(pool) > 0
    torch.testing.assert_close(loss.cpu(), cpu_loss)
    for parameter, expected in zip(device_model.parameters(), cpu_grads, strict=True):
        torch.testing.assert_close(parameter.grad.cpu(), expected)


def test_mem_pool_rejects_an_allocator():
    with pytest.raises(ValueError, match="allocator=None"):
        torch.openreg.MemPool(allocator=object())
    assert torch.openreg.MemPool().allocator is None


def test_use_mem_pool_rejects_invalid_device():
    pool = torch.openreg.MemPool()
    with pytest.raises((RuntimeError, ValueError)):
        with torch.openreg.use_mem_pool(pool, device=9):
            pass
    assert pool.use_count() == 1


OOM_SCRIPT = """
import json, torch, torch_openreg

results = {}
for use_on_oom in (False, True):
    pool = torch.openreg.MemPool(use_on_oom=use_on_oom)
    with torch.openreg.use_mem_pool(pool):
        cached = torch.empty(40 << 20, dtype=torch.uint8, device="openreg")
    del cached  # 40 MiB stay in the pool; 24 MiB of the device are left
    try:
        outside = torch.empty(30 << 20, dtype=torch.uint8, device="openreg")
        outside.fill_(7)
        results[str(use_on_oom)] = outside[-4:].cpu().tolist() == [7] * 4
        del outside
    except torch.OutOfMemoryError:
        results[str(use_on_oom)] = "oom"
    del pool
print(json.dumps(results))
"""


@pytest.mark.child_interpreters
def test_use_on_oom_lends_the_pools_free_memory(run_python):
    result = run_python(OOM_SCRIPT, OPENREG_DEVICE_MEMORY="64MiB")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"False": "oom", "True": True}
