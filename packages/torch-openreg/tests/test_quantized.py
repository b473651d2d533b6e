"""Quantized tensors are refused on openreg, clearly, at creation and at ``.to()``.

Why (``csrc/kernels/quantized.cpp``, ``docs/correctness.md``): a
quantized tensor carries a quantizer that the CPU's quantized kernels read
through engines keeping host-side state, and PyTorch's own quantization flows
(torch.ao) compute in float. Every route to a quantized openreg tensor raises
NotImplementedError naming what to do instead, and leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

MESSAGE = r"openreg does not support quantized tensors.*dequantize\(\)"

ROUTES: dict[str, Callable[[], object]] = {
    "to_per_tensor": lambda: torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8).to(
        "openreg"
    ),
    "to_per_channel": lambda: torch.quantize_per_channel(
        torch.randn(2, 3), torch.tensor([0.1, 0.2]), torch.tensor([0, 1]), 0, torch.quint8
    ).to("openreg"),
    "to_with_copy": lambda: torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint32).to(
        "openreg", copy=True
    ),
    "quantize_openreg_tensor": lambda: torch.quantize_per_tensor(
        torch.randn(4, device="openreg"), 0.1, 0, torch.qint8
    ),
    "quantize_per_channel_openreg": lambda: torch.quantize_per_channel(
        torch.randn(2, 3, device="openreg"),
        torch.tensor([0.1, 0.2], device="openreg"),
        torch.tensor([0, 1], device="openreg"),
        0,
        torch.quint8,
    ),
    "quantize_dynamic": lambda: torch.quantize_per_tensor_dynamic(
        torch.randn(4, device="openreg"), torch.quint8, False
    ),
    "empty_affine_quantized": lambda: torch._empty_affine_quantized(
        [3], scale=0.5, zero_point=0, dtype=torch.qint8, device="openreg"
    ),
    "empty_qint8": lambda: torch.empty(3, dtype=torch.qint8, device="openreg"),
    "zeros_quint8": lambda: torch.zeros(3, dtype=torch.quint8, device="openreg"),
    "dense_to_qint8": lambda: torch.ones(3, device="openreg").to(torch.qint8),
}


@pytest.mark.parametrize("route", ROUTES)
def test_every_route_to_a_quantized_openreg_tensor_is_refused(route: str) -> None:
    before = torch.openreg.memory_allocated()
    with pytest.raises(NotImplementedError, match=MESSAGE):
        ROUTES[route]()
    torch.openreg.synchronize()
    assert torch.openreg.memory_allocated() <= before


def test_the_cpu_accepts_what_openreg_refuses() -> None:
    # The refusals are openreg's: the same calls work on the CPU.
    quantized = torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8)
    assert quantized.to("cpu", copy=True).is_quantized
    assert torch._empty_affine_quantized(
        [3], scale=0.5, zero_point=0, dtype=torch.qint8
    ).is_quantized


def test_the_advised_alternative_works() -> None:
    values = torch.randn(6)
    quantized = torch.quantize_per_tensor(values, 0.05, 3, torch.quint8)
    moved = quantized.dequantize().to("openreg")
    assert moved.device.type == "openreg" and not moved.is_quantized
    torch.testing.assert_close(moved.cpu(), quantized.dequantize(), rtol=0, atol=0)
    # Quantize-dequantize in float (what torch.ao's fake quantization does) runs on openreg.
    expected = torch.fake_quantize_per_tensor_affine(values, 0.05, 3, 0, 255)
    actual = torch.fake_quantize_per_tensor_affine(values.to("openreg"), 0.05, 3, 0, 255)
    torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0)


def test_device_stays_usable_after_a_refusal() -> None:
    with pytest.raises(NotImplementedError):
        torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8).to("openreg")
    x = torch.arange(4.0, device="openreg")
    assert torch.equal((x * 2).cpu(), torch.arange(4.0) * 2)
