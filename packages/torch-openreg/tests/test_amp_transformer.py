"""A tiny GPT-style model trained with bfloat16 autocast on openreg, against the CPU.

The model is built in the test from a config (``_amp_models.GPTConfig``) and
randomly initialised. The openreg run uses ``torch.autocast("openreg",
dtype=torch.bfloat16)``; the CPU reference writes out the casts of CUDA's
policy: linear layers and attention products in bfloat16, layer norms and the
attention softmax in float32, residual sums promoted to float32. Both run the
CPU's kernels on the same dtypes, so they agree exactly (measured).
"""

from __future__ import annotations

import pytest
import torch
from _amp_models import GPT, GPTConfig, Recipe, batches, make_model, train

STEPS = 6
EXACT = {"rtol": 0.0, "atol": 0.0}
RECIPE = Recipe(
    dtype=torch.bfloat16, scaler=False, optimizer=lambda p: torch.optim.AdamW(p, lr=1e-2)
)


def test_gpt_trains_with_bf16_autocast_like_the_cpu() -> None:
    # One batch, seen repeatedly: the model fits it, so the loss must fall.
    model, data = make_model("gpt"), batches("gpt", 1) * STEPS
    run = train(model, data, "openreg", RECIPE)
    reference = train(model, data, "cpu", RECIPE)
    torch.testing.assert_close(run.losses, reference.losses, **EXACT)
    assert run.parameters.keys() == reference.parameters.keys()
    for name, value in run.parameters.items():
        torch.testing.assert_close(value, reference.parameters[name], **EXACT, msg=name)
    assert run.losses[-1] < 0.9 * run.losses[0]


def test_gpt_dtypes_under_autocast() -> None:
    model = GPT(GPTConfig()).to("openreg")
    tokens, _ = batches("gpt", 1)[0]
    seen: dict[str, torch.dtype] = {}
    model.blocks[0].norm1.register_forward_hook(lambda m, i, o: seen.update(norm=o.dtype))
    model.blocks[0].attention.qkv.register_forward_hook(lambda m, i, o: seen.update(qkv=o.dtype))
    with torch.autocast("openreg", dtype=torch.bfloat16):
        logits = model(tokens.to("openreg"))
    assert seen == {"norm": torch.float32, "qkv": torch.bfloat16}
    assert logits.dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in model.parameters())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_gpt_forward_matches_explicit_casts(dtype: torch.dtype) -> None:
    model = GPT(GPTConfig())
    tokens, _ = batches("gpt", 1)[0]
    expected = model(tokens, dtype)
    on_device = model.to("openreg")
    with torch.autocast("openreg", dtype=dtype):
        logits = on_device(tokens.to("openreg"))
    assert logits.dtype == expected.dtype == dtype
    torch.testing.assert_close(logits.cpu(), expected, **EXACT)
