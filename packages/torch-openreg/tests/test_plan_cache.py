"""The planner shared by the boxed fallback and the functional native kernels.

One policy for both: the first call of a signature runs synchronously (its real
results confirm the meta kernel's plan), later calls are asynchronous, and plans
live in one bounded least-recently-used cache, so changing shapes evict only the
plans no longer used instead of dropping every plan at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F
from _async import held_stream, warm

import torch_openreg  # registers the device; _C gives the plan cache statistics


def busy() -> bool:
    return not torch.openreg.current_stream().query()


def info() -> dict[str, int]:
    return torch_openreg._C._plan_cache_info()


@pytest.fixture
def small_cache() -> Iterator[Callable[[int], None]]:
    original = info()["capacity"]

    def set_capacity(capacity: int) -> None:
        torch_openreg._C._set_plan_cache_capacity(capacity)

    yield set_capacity
    torch_openreg._C._set_plan_cache_capacity(original)


def conv_case(size: int) -> tuple[Callable[[], torch.Tensor], Callable[[], torch.Tensor]]:
    """A convolution (a functional native kernel) on openreg and its CPU reference."""
    g = torch.Generator().manual_seed(size)
    x, w = torch.randn(1, 2, size, size, generator=g), torch.randn(3, 2, 3, 3, generator=g)
    xd, wd = x.to("openreg"), w.to("openreg")
    return (lambda: F.conv2d(xd, wd, padding=1)), (lambda: F.conv2d(x, w, padding=1))


def test_first_call_of_a_functional_kernel_signature_is_synchronous():
    run, _ = conv_case(7)
    with held_stream() as held:
        held.release_soon()
        run()  # a new signature: waits for the queued work, then runs the kernel
        assert held.released
    assert not busy()


def test_later_calls_of_a_functional_kernel_signature_are_asynchronous():
    run, reference = conv_case(9)
    warm(run)
    with held_stream():
        result = run()  # returns while the hold keeps its kernel queued
        assert busy()
    torch.testing.assert_close(result.cpu(), reference())


def test_first_call_of_an_operator_signature_is_synchronous():
    x = torch.randn(13, 5, device="openreg")
    with held_stream() as held:
        held.release_soon()
        torch.atan2(x, x)
        assert held.released
    assert not busy()


def test_the_cache_is_bounded_and_keeps_recent_plans(small_cache):
    small_cache(4)
    shapes = [(n, 3) for n in range(31, 41)]  # ten signatures, not seen before
    tensors = {shape: torch.randn(shape) for shape in shapes}
    for shape in shapes:
        result = torch.sinh(tensors[shape].to("openreg"))
        torch.testing.assert_close(result.cpu(), torch.sinh(tensors[shape]))
    after = info()
    assert after["size"] <= 4
    assert after["evictions"] >= 6
    # The most recent signature is still planned: calling it again is a hit.
    hits = after["hits"]
    recent = tensors[shapes[-1]].to("openreg")
    torch.testing.assert_close(torch.sinh(recent).cpu(), torch.sinh(tensors[shapes[-1]]))
    assert info()["hits"] > hits


def test_an_evicted_signature_is_planned_again_and_stays_correct(small_cache):
    small_cache(2)
    first = torch.randn(43, 2)
    first_device = first.to("openreg")
    torch.cosh(first_device)
    for n in range(44, 50):  # push the first signature out
        torch.cosh(torch.randn(n, 2, device="openreg"))
    misses = info()["misses"]
    torch.testing.assert_close(torch.cosh(first_device).cpu(), torch.cosh(first))
    assert info()["misses"] > misses


def test_capacity_must_be_positive():
    with pytest.raises(RuntimeError, match="at least 1"):
        torch_openreg._C._set_plan_cache_capacity(0)


@pytest.mark.child_interpreters
def test_a_storage_shrunk_below_its_tensor_is_refused_not_read(run_python):
    result = run_python(
        """
        import torch, torch_openreg
        t = torch.ones(4, device="openreg")
        t.untyped_storage().resize_(0)
        try:
            t.cpu()
        except RuntimeError as error:
            print("refused:", error)
        print(torch.ones(3, device="openreg").sum().item())
        """
    )
    assert result.returncode == 0, result.stderr
    assert "storage holds only 0 bytes" in result.stdout
    assert "resize_()" in result.stdout
    assert result.stdout.strip().endswith("3.0")


@pytest.mark.child_interpreters
def test_a_host_storage_shrunk_below_its_tensor_is_refused_not_read(run_python):
    # A copy that moves bytes unchanged is a runtime copy, which cannot check host
    # memory itself: the binding checks both sides' storages before it.
    result = run_python(
        """
        import torch, torch_openreg
        t = torch.ones(4)
        t.untyped_storage().resize_(0)
        try:
            t.to("openreg")
        except RuntimeError as error:
            print("refused:", error)
        print(torch.ones(3, device="openreg").sum().item())
        """
    )
    assert result.returncode == 0, result.stderr
    assert "storage holds only 0 bytes" in result.stdout
    assert result.stdout.strip().endswith("3.0")
