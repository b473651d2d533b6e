"""Efficient zero tensors (``torch._efficientzerotensor``) on openreg, against the CPU.

Autograd and ``torch.func`` use them for gradients known to be zero; they carry
the ZeroTensor dispatch key and own no memory (``csrc/kernels/zero_tensor.cpp``).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from _differential import assert_matches
from torch.func import grad, hessian, jacfwd, jacrev, jvp

EXACT = {"rtol": 0.0, "atol": 0.0}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.complex64])
@pytest.mark.usefixtures("steady_memory_stats")
def test_efficient_zero_tensor_is_like_the_cpu_one(dtype: torch.dtype) -> None:
    expected = torch._efficientzerotensor(2, 3, dtype=dtype)
    before = torch.openreg.memory_allocated()
    actual = torch._efficientzerotensor(2, 3, dtype=dtype, device="openreg")
    assert torch.openreg.memory_allocated() == before, "a zero tensor must not allocate"
    assert actual._is_zerotensor() and expected._is_zerotensor()
    assert actual.device == torch.device("openreg", torch.openreg.current_device())
    assert (actual.shape, actual.dtype, actual.stride()) == (
        expected.shape,
        expected.dtype,
        expected.stride(),
    )
    assert actual.data_ptr() == 0
    keys = str(torch._C._dispatch_keys(actual))
    assert "ZeroTensor" in keys and "PrivateUse1" in keys, keys
    torch.testing.assert_close(actual.cpu(), expected, **EXACT)
    # Printing reads it like any tensor.
    assert repr(actual).replace(", device='openreg:0'", "") == repr(expected)


def test_efficient_zero_tensor_on_a_chosen_device() -> None:
    zeros = torch._efficientzerotensor(4, device="openreg:1")
    assert zeros.device == torch.device("openreg:1") and zeros._is_zerotensor()
    with torch.openreg.device(1):
        assert torch._efficientzerotensor(1, device="openreg").device == torch.device("openreg:1")


OPERATIONS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add": lambda z, x: z + x,
    "mul": lambda z, x: z * x,
    "sub-reversed": lambda z, x: x - z,
    "matmul": lambda z, x: z.reshape(3, 2) @ x.reshape(2, 3),
    "sum": lambda z, x: z.sum(),
    "clone": lambda z, x: z.clone(),
    "view": lambda z, x: z.view(3, 2).t(),
    "exp": lambda z, x: z.exp(),
}


@pytest.mark.parametrize("name", OPERATIONS)
def test_operations_on_zero_tensors_match_the_cpu(name: str) -> None:
    x = torch.randn(2, 3)
    cpu_zero = torch._efficientzerotensor(2, 3)
    expected = OPERATIONS[name](cpu_zero, x)
    actual = OPERATIONS[name](torch._efficientzerotensor(2, 3, device="openreg"), x.to("openreg"))
    assert_matches(actual, expected, exact=True)
    assert actual._is_zerotensor() == expected._is_zerotensor()


def scalar_function(x: torch.Tensor) -> torch.Tensor:
    return (x.sin() * x.cos()).sum() + (x**3).sum() + (x[0] * x[1:]).prod()


@pytest.mark.parametrize(
    "transform",
    [
        pytest.param(lambda x: hessian(scalar_function)(x), id="hessian"),
        pytest.param(lambda x: jacfwd(jacrev(scalar_function))(x), id="jacfwd-jacrev"),
        pytest.param(
            lambda x: jvp(grad(scalar_function), (x,), (torch.ones_like(x),))[1], id="jvp-grad"
        ),
        pytest.param(lambda x: hessian(lambda y: (y * y).sum())(x), id="hessian-of-quadratic"),
    ],
)
def test_functorch_transforms_match_the_cpu(
    transform: Callable[[torch.Tensor], torch.Tensor],
) -> None:
    x = torch.randn(5, dtype=torch.float64)
    assert_matches(transform(x.to("openreg")), transform(x), exact=True)


def test_forward_mode_dual_tensors_through_autograd_grad() -> None:
    def run(device: str) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(0)
        p = torch.randn(4, generator=generator).to(device).requires_grad_()
        tangent = torch.randn(4, generator=generator).to(device)
        with fwAD.dual_level():
            dual = fwAD.make_dual(p, tangent)
            y = (dual * dual.sin()).sum() + dual.exp().mean()
            directional = fwAD.unpack_dual(y).tangent
            (gradient,) = torch.autograd.grad(directional, p)
        return directional.detach(), gradient

    assert_matches(run("openreg"), run("cpu"), exact=True)
