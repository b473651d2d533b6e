"""torch.ops.openreg.swish: a backend-specific operator with its own autograd formula.

swish(x) = x * sigmoid(x). The openreg kernel is a hand-written loop; the CPU
kernel uses ATen ops; both are checked against each other and against the
formula, and the derivative is checked against the CPU and by gradcheck.
"""

from __future__ import annotations

import pytest
import torch

FLOAT_DTYPES = [torch.float32, torch.float64]


def inputs(dtype: torch.dtype, shape: tuple[int, ...] = (6, 7)) -> torch.Tensor:
    values = torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 4
    values.view(-1)[:4] = torch.tensor([0.0, -0.0, 30.0, -30.0])
    return values.to(dtype)


def test_op_is_registered():
    schema = torch.ops.openreg.swish.default._schema
    assert str(schema) == "openreg::swish(Tensor x) -> Tensor"


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("device", ["openreg:0", "openreg:1"])
def test_forward_matches_cpu(dtype, device):
    x = inputs(dtype)
    actual = torch.ops.openreg.swish(x.to(device))
    assert actual.device == torch.device(device)
    assert actual.dtype == dtype
    assert actual.shape == x.shape
    torch.testing.assert_close(actual.cpu(), torch.ops.openreg.swish(x))
    torch.testing.assert_close(actual.cpu(), x * torch.sigmoid(x))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_forward_matches_silu(dtype):
    x = inputs(dtype)
    torch.testing.assert_close(
        torch.ops.openreg.swish(x.to("openreg")).cpu(), torch.nn.functional.silu(x)
    )


def test_forward_on_non_contiguous_input():
    x = inputs(torch.float32, (5, 8))
    view = x.to("openreg").t()[::2]
    actual = torch.ops.openreg.swish(view)
    assert actual.shape == view.shape
    expected = x.t()[::2]
    torch.testing.assert_close(actual.cpu(), expected * torch.sigmoid(expected))


def test_forward_does_not_modify_input():
    x = inputs(torch.float32)
    on_device = x.to("openreg")
    torch.ops.openreg.swish(on_device)
    torch.testing.assert_close(on_device.cpu(), x, rtol=0, atol=0)


def test_forward_on_other_device_than_current():
    x = inputs(torch.float64)
    with torch.openreg.device(0):
        actual = torch.ops.openreg.swish(x.to("openreg:1"))
    assert actual.device == torch.device("openreg:1")
    torch.testing.assert_close(actual.cpu(), x * torch.sigmoid(x))


@pytest.mark.parametrize("shape", [(), (0,), (1,), (2, 0, 3)])
def test_forward_edge_shapes(shape):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    actual = torch.ops.openreg.swish(x.to("openreg"))
    assert actual.shape == x.shape
    torch.testing.assert_close(actual.cpu(), x * torch.sigmoid(x))


def test_integer_input_raises():
    with pytest.raises(NotImplementedError, match="Long"):
        torch.ops.openreg.swish(torch.arange(3, device="openreg"))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_gradient_matches_cpu(dtype):
    x = inputs(dtype)
    grad_output = torch.randn(x.shape, dtype=dtype, generator=torch.Generator().manual_seed(2))

    cpu_x = x.clone().requires_grad_()
    torch.ops.openreg.swish(cpu_x).backward(grad_output)

    device_x = x.to("openreg").requires_grad_()
    result = torch.ops.openreg.swish(device_x)
    assert result.requires_grad
    assert result.grad_fn is not None
    result.backward(grad_output.to("openreg"))

    assert device_x.grad.device == torch.device("openreg:0")
    torch.testing.assert_close(device_x.grad.cpu(), cpu_x.grad)


def test_gradient_matches_analytic_formula():
    x = inputs(torch.float64)
    device_x = x.to("openreg:1").requires_grad_()
    (grad,) = torch.autograd.grad(torch.ops.openreg.swish(device_x).sum(), device_x)
    s = torch.sigmoid(x)
    assert grad.device == torch.device("openreg:1")
    torch.testing.assert_close(grad.cpu(), s + x * s * (1 - s))


def test_gradient_matches_silu_autograd():
    x = inputs(torch.float32)
    reference = x.clone().requires_grad_()
    torch.nn.functional.silu(reference).pow(2).sum().backward()
    device_x = x.to("openreg").requires_grad_()
    torch.ops.openreg.swish(device_x).pow(2).sum().backward()
    torch.testing.assert_close(device_x.grad.cpu(), reference.grad)


def test_no_grad_builds_no_graph():
    x = inputs(torch.float32).to("openreg").requires_grad_()
    with torch.no_grad():
        result = torch.ops.openreg.swish(x)
    assert not result.requires_grad
    assert result.grad_fn is None


def test_gradcheck_float64_on_openreg():
    x = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    x = x.to("openreg").requires_grad_()
    assert torch.autograd.gradcheck(torch.ops.openreg.swish, (x,))


def test_gradgradcheck_float64_on_openreg():
    x = torch.randn(5, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    x = x.to("openreg").requires_grad_()
    assert torch.autograd.gradgradcheck(torch.ops.openreg.swish, (x,))


def test_in_a_module_trains():
    torch.manual_seed(0)
    linear = torch.nn.Linear(3, 1).openreg()
    data = torch.randn(16, 3, device="openreg")
    target = torch.randn(16, 1, device="openreg")
    optimizer = torch.optim.SGD(linear.parameters(), lr=0.1)
    losses = []
    for _ in range(20):
        optimizer.zero_grad()
        loss = (torch.ops.openreg.swish(linear(data)) - target).pow(2).mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
