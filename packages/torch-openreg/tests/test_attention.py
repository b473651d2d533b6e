"""``F.scaled_dot_product_attention`` picks its backend as the CPU does.

openreg answers PyTorch's backend question with the CPU's own selection
(``csrc/kernels/attention.cpp``), so the same kernel runs on the same bytes:
results are bit-identical to the CPU's, including the CPU flash kernel in half
and bfloat16, and ``torch.nn.attention.sdpa_kernel`` restrictions apply (the
CPU's "No viable backend" error where nothing allowed fits).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from _differential import assert_matches, to_device
from torch.nn.attention import SDPBackend, sdpa_kernel

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def attention_inputs(
    dtype: torch.dtype, case: str
) -> tuple[tuple[torch.Tensor, ...], dict[str, Any]]:
    generator = torch.Generator().manual_seed(0)

    def make(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator).to(dtype)

    q, k, v = make(2, 4, 6, 8), make(2, 4, 7, 8), make(2, 4, 7, 8)
    if case == "plain":
        return (q, k, v), {}
    if case == "causal":
        return (q, k[:, :, :6], v[:, :, :6]), {"is_causal": True}
    if case == "float-mask":
        return (q, k, v), {"attn_mask": make(6, 7)}
    if case == "bool-mask":
        return (q, k, v), {"attn_mask": torch.rand(2, 1, 6, 7, generator=generator) > 0.3}
    if case == "scale":
        return (q, k, v), {"scale": 0.3}
    if case == "gqa":
        return (q, k[:, :2], v[:, :2]), {"enable_gqa": True}
    if case == "transposed-query":  # last dimension not contiguous: not every kernel accepts it
        return (q.transpose(-1, -2).contiguous().transpose(-1, -2), k, v), {}
    raise ValueError(case)


CASES = ["plain", "causal", "float-mask", "bool-mask", "scale", "gqa", "transposed-query"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_backend_choice_and_result_match_the_cpu(dtype: torch.dtype, case: str) -> None:
    args, kwargs = attention_inputs(dtype, case)
    device_args, device_kwargs = to_device((args, kwargs))
    choice = torch._fused_sdp_choice(*args, **kwargs)
    assert torch._fused_sdp_choice(*device_args, **device_kwargs) == choice
    expected = F.scaled_dot_product_attention(*args, **kwargs)
    actual = F.scaled_dot_product_attention(*device_args, **device_kwargs)
    assert_matches(actual, expected, exact=True)


def test_the_cpu_flash_kernel_is_what_runs_in_half_precision() -> None:
    args, _ = attention_inputs(torch.float16, "plain")
    assert torch._fused_sdp_choice(*to_device(args)) == SDPBackend.FLASH_ATTENTION.value
    expected = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(*args)[0]
    actual = F.scaled_dot_product_attention(*to_device(args))
    assert_matches(actual, expected, exact=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", ["plain", "causal", "float-mask"])
def test_gradients_match_the_cpu(dtype: torch.dtype, case: str) -> None:
    args, kwargs = attention_inputs(dtype, case)

    def run(tensors: tuple[torch.Tensor, ...], options: dict[str, Any]) -> list[torch.Tensor]:
        leaves = [t.detach().requires_grad_() for t in tensors]
        out = F.scaled_dot_product_attention(*leaves, **options)
        out.backward(torch.ones_like(out))
        return [out.detach()] + [leaf.grad for leaf in leaves]

    assert_matches(run(*to_device((args, kwargs))), run(args, kwargs), exact=True)


BACKEND_SETS = {
    "math": [SDPBackend.MATH],
    "flash": [SDPBackend.FLASH_ATTENTION],
    "efficient": [SDPBackend.EFFICIENT_ATTENTION],
    "cudnn": [SDPBackend.CUDNN_ATTENTION],
    "efficient+cudnn": [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION],
}


def outcome(args: tuple[torch.Tensor, ...], kwargs: dict[str, Any]) -> torch.Tensor | str:
    try:
        return F.scaled_dot_product_attention(*args, **kwargs)
    except RuntimeError as error:
        return str(error).split("\n")[0]


@pytest.mark.parametrize("backends", BACKEND_SETS)
@pytest.mark.parametrize("case", ["plain", "transposed-query"])
def test_sdpa_kernel_restrictions_are_honoured_like_on_the_cpu(backends: str, case: str) -> None:
    args, kwargs = attention_inputs(torch.float32, case)
    device_args, device_kwargs = to_device((args, kwargs))
    with sdpa_kernel(BACKEND_SETS[backends]):
        expected = outcome(args, kwargs)
        actual = outcome(device_args, device_kwargs)
    if isinstance(expected, str):
        assert actual == expected  # e.g. "No viable backend ..." or "No available kernel ..."
    else:
        assert_matches(actual, expected, exact=True)


def test_only_math_allowed_runs_the_math_kernel() -> None:
    args, _ = attention_inputs(torch.float16, "plain")
    with sdpa_kernel([SDPBackend.MATH]):
        assert torch._fused_sdp_choice(*to_device(args)) == SDPBackend.MATH.value
        expected = F.scaled_dot_product_attention(*args)
        actual = F.scaled_dot_product_attention(*to_device(args))
    assert_matches(actual, expected, exact=True)
    # Differs from the flash kernel's result in half precision: the choice mattered.
    assert not torch.equal(expected, F.scaled_dot_product_attention(*args))
