"""Operations mixing devices fail as on CUDA; the CUDA exceptions are allowed.

Rejected: an openreg tensor with a (non-scalar) CPU tensor, and tensors on two
openreg devices. Allowed, as on CUDA: 0-dim CPU tensors (treated as scalars)
and CPU index tensors in indexing.
"""

from __future__ import annotations

import pytest
import torch

SAME_DEVICE = "Expected all tensors to be on the same device"


def cpu_and(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.arange(4.0, device=device), torch.ones(4)


BINARY_OPS = {
    "add": lambda a, b: a + b,
    "radd": lambda a, b: b + a,
    "mul": lambda a, b: torch.mul(a, b),
    "add_": lambda a, b: a.clone().add_(b),
    "mm": lambda a, b: a.reshape(2, 2) @ b.reshape(2, 2),
    "cat": lambda a, b: torch.cat([a, b]),
    "stack": lambda a, b: torch.stack([a, b]),
    "where": lambda a, b: torch.where(a > 1, a, b),
    "maximum": lambda a, b: torch.maximum(a, b),
    "index_select": lambda a, b: a.index_select(0, b.long()),
    "out": lambda a, b: torch.add(a, a, out=b),
    "copy_via_lerp": lambda a, b: torch.lerp(a, b, 0.5),
}


@pytest.mark.parametrize("name", list(BINARY_OPS))
def test_openreg_with_cpu_tensor_raises(name):
    openreg, cpu = cpu_and("openreg")
    with pytest.raises(RuntimeError, match=SAME_DEVICE) as info:
        BINARY_OPS[name](openreg, cpu)
    message = str(info.value)
    assert "openreg:0" in message
    assert "cpu" in message


@pytest.mark.parametrize("name", list(BINARY_OPS))
def test_two_openreg_devices_raise(name):
    first = torch.arange(4.0, device="openreg:0")
    second = torch.ones(4, device="openreg:1")
    with pytest.raises(RuntimeError, match=SAME_DEVICE) as info:
        BINARY_OPS[name](first, second)
    message = str(info.value)
    assert "openreg:0" in message
    assert "openreg:1" in message


def test_mismatch_leaves_inplace_target_untouched():
    target = torch.arange(4.0, device="openreg")
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        target.add_(torch.ones(4))
    torch.testing.assert_close(target.cpu(), torch.arange(4.0), rtol=0, atol=0)


def test_zero_dim_openreg_on_other_device_raises():
    # Only CPU scalars may mix; a 0-dim tensor on another openreg device may not.
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.arange(4.0, device="openreg:0") + torch.tensor(1.0, device="openreg:1")


def test_zero_dim_openreg_with_cpu_tensor_raises():
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.tensor(1.0, device="openreg") + torch.ones(3)


ZERO_DIM_CPU_OPS = {
    "add": lambda a, s: a + s,
    "radd": lambda a, s: s + a,
    "mul_": lambda a, s: a.clone().mul_(s),
    "div": lambda a, s: torch.div(a, s),
    "where": lambda a, s: torch.where(a > 1, a, s),
    "fill_": lambda a, s: a.clone().fill_(s),
    "pow": lambda a, s: torch.pow(a, s),
}


@pytest.mark.parametrize("name", list(ZERO_DIM_CPU_OPS))
@pytest.mark.parametrize("device", ["openreg:0", "openreg:1"])
def test_zero_dim_cpu_tensor_may_mix(name, device):
    op = ZERO_DIM_CPU_OPS[name]
    base = torch.arange(4.0)
    scalar = torch.tensor(2.0)
    result = op(base.to(device), scalar)
    assert result.device == torch.device(device)
    torch.testing.assert_close(result.cpu(), op(base, scalar))


def test_index_with_cpu_long_tensor():
    base = torch.arange(10.0) * 3
    index = torch.tensor([7, 0, 3, 3])
    result = base.to("openreg")[index]
    assert result.device == torch.device("openreg:0")
    torch.testing.assert_close(result.cpu(), base[index], rtol=0, atol=0)


def test_index_with_cpu_bool_mask():
    base = torch.arange(6.0)
    mask = torch.tensor([True, False, True, False, False, True])
    result = base.to("openreg:1")[mask]
    assert result.device == torch.device("openreg:1")
    torch.testing.assert_close(result.cpu(), base[mask], rtol=0, atol=0)


def test_multi_dim_index_with_cpu_tensors():
    base = torch.arange(20.0).reshape(4, 5)
    rows, cols = torch.tensor([0, 3, 1]), torch.tensor([4, 0, 2])
    result = base.to("openreg")[rows, cols]
    torch.testing.assert_close(result.cpu(), base[rows, cols], rtol=0, atol=0)
    result = base.to("openreg")[:, cols]
    torch.testing.assert_close(result.cpu(), base[:, cols], rtol=0, atol=0)


def test_index_put_with_cpu_indices():
    base = torch.zeros(5)
    index = torch.tensor([4, 1])
    on_device = base.to("openreg")
    on_device[index] = torch.tensor([7.0, 8.0], device="openreg")
    base[index] = torch.tensor([7.0, 8.0])
    torch.testing.assert_close(on_device.cpu(), base, rtol=0, atol=0)


def test_index_put_with_cpu_indices_and_scalar_value():
    base = torch.zeros(3, 3)
    mask = torch.eye(3, dtype=torch.bool)
    on_device = base.to("openreg")
    on_device[mask] = 5.0
    base[mask] = 5.0
    torch.testing.assert_close(on_device.cpu(), base, rtol=0, atol=0)


def test_index_put_with_cpu_values_raises():
    on_device = torch.zeros(5, device="openreg")
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        on_device.index_put_((torch.tensor([0, 1]),), torch.tensor([1.0, 2.0]))


def test_clamp_with_zero_dim_cpu_bound_raises():
    # clamp's TensorIterator does not accept CPU scalars (CUDA raises the same way).
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.clamp(torch.arange(4.0, device="openreg"), min=torch.tensor(2.0))


def test_index_with_other_openreg_device_index_raises():
    base = torch.arange(4.0, device="openreg:0")
    # The message CUDA gives for indices on another device.
    with pytest.raises(
        RuntimeError,
        match=r"indices should be either on cpu or on the same device as the indexed tensor "
        r"\(openreg:0\)",
    ):
        base[torch.tensor([1, 2], device="openreg:1")]
