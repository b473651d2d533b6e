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


def test_a_foreach_operator_is_one_launch_for_its_whole_list():
    tensors = [torch.full((3 + i,), float(i), device="openreg") for i in range(5)]
    reference = [t.cpu() for t in tensors]
    warm(lambda: torch._foreach_mul_(tensors, 2.0))
    torch._foreach_mul_(reference, 2.0)
    before = info()["hits"] + info()["misses"]
    torch._foreach_mul_(tensors, 2.0)  # one plan look-up, not one per tensor
    assert info()["hits"] + info()["misses"] - before == 1
    torch._foreach_mul_(reference, 2.0)
    for device_tensor, cpu_tensor in zip(tensors, reference, strict=True):
        torch.testing.assert_close(device_tensor.cpu(), cpu_tensor, rtol=0, atol=0)


def test_float_scalars_that_change_every_call_are_not_new_signatures():
    # Adam's step size changes every step: keyed by value, each step would plan
    # every parameter shape anew and run it synchronously.
    params = [torch.randn(4, 3, device="openreg"), torch.randn(7, device="openreg")]
    numerators = [torch.randn_like(p) for p in params]
    denominators = [torch.rand_like(p) + 1 for p in params]
    cpu = [[t.cpu() for t in group] for group in (params, numerators, denominators)]
    x = torch.randn(5, device="openreg")
    x_cpu = x.cpu()
    warm(lambda: torch._foreach_addcdiv_(params, numerators, denominators, [0.5, 0.25]),
         lambda: x.mul_(0.5))  # fmt: skip
    torch._foreach_addcdiv_(*cpu, [0.5, 0.25])
    x_cpu.mul_(0.5)
    misses = info()["misses"]
    for step in range(1, 4):
        scalars = [-0.1 / step, 0.3 * step]
        torch._foreach_addcdiv_(params, numerators, denominators, scalars)
        torch._foreach_addcdiv_(*cpu, scalars)
        x.mul_(1.0 + step)
        x_cpu.mul_(1.0 + step)
    assert info()["misses"] == misses
    for device_tensor, cpu_tensor in zip(params, cpu[0], strict=True):
        torch.testing.assert_close(device_tensor.cpu(), cpu_tensor, rtol=0, atol=0)
    torch.testing.assert_close(x.cpu(), x_cpu, rtol=0, atol=0)


def test_integer_scalars_and_non_pointwise_floats_stay_in_the_signature():
    x = torch.arange(1, 7, device="openreg")  # an integer tensor: pow checks the exponent
    warm(lambda: x.pow(2))
    misses = info()["misses"]
    torch.testing.assert_close(x.pow(3).cpu(), torch.arange(1, 7).pow(3), rtol=0, atol=0)
    assert info()["misses"] == misses + 1
    tensors = [torch.randn(6, device="openreg")]
    warm(lambda: torch._foreach_norm(tensors, 2.0))
    misses = info()["misses"]
    torch._foreach_norm(tensors, 1.0)  # a reduction: its ord is not data
    assert info()["misses"] > misses


def test_a_foreach_operator_returning_new_tensors_is_one_launch_too():
    tensors = [torch.rand(2 + i, device="openreg") + 0.5 for i in range(4)]
    warm(lambda: torch._foreach_sqrt(tensors))
    before = info()["hits"] + info()["misses"]
    roots = torch._foreach_sqrt(tensors)
    assert info()["hits"] + info()["misses"] - before == 1
    assert [r.device.type for r in roots] == ["openreg"] * 4
    expected = torch._foreach_sqrt([t.cpu() for t in tensors])
    for root, reference in zip(roots, expected, strict=True):
        torch.testing.assert_close(root.cpu(), reference, rtol=0, atol=0)
