"""torch.utils.checkpoint on openreg, with and without autocast.

Checkpointing drops activations in the forward pass and recomputes them in the
backward pass, which runs outside the autocast region: torch records the
device's autocast state (and its RNG state, for dropout) at forward time and
restores both for the recomputation. A device whose autocast state or RNG
state were not restored would recompute different activations (float32
instead of float16, other dropout masks), so the gradients of a checkpointed
model must equal those of the same model run without checkpointing, exactly.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

EXACT = {"rtol": 0.0, "atol": 0.0}


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(32)
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 32)
        self.dropout = nn.Dropout(0.25)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.dropout(self.fc2(F.gelu(self.fc1(self.norm(x)))))


class Stack(nn.Module):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.embed = nn.Linear(16, 32)
        self.blocks = nn.ModuleList(Block() for _ in range(3))
        self.head = nn.Linear(32, 4)
        self.mode = mode  # "none", "reentrant" or "non_reentrant"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            if self.mode == "none":
                h = block(h)
            else:
                h = checkpoint(block, h, use_reentrant=self.mode == "reentrant")
        return self.head(h)


def gradients(mode: str, dtype: torch.dtype | None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    model = Stack(mode).to("openreg")
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(8, 16, generator=generator).to("openreg")
    target = torch.randint(0, 4, (8,), generator=generator).to("openreg")
    torch.openreg.manual_seed(2)  # the dropout masks
    with torch.autocast("openreg", dtype=dtype or torch.float16, enabled=dtype is not None):
        logits = model(x)
        loss = F.cross_entropy(logits, target)
    assert logits.dtype == (dtype or torch.float32)
    loss.backward()
    return loss.detach().cpu(), {n: p.grad.cpu() for n, p in model.named_parameters()}


@pytest.mark.parametrize("dtype", [None, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("mode", ["reentrant", "non_reentrant"])
def test_checkpointed_gradients_equal_unchecked(mode: str, dtype: torch.dtype | None) -> None:
    loss, grads = gradients(mode, dtype)
    expected_loss, expected_grads = gradients("none", dtype)
    torch.testing.assert_close(loss, expected_loss, **EXACT)
    assert grads.keys() == expected_grads.keys()
    for name, grad in grads.items():
        assert grad.dtype == torch.float32, name
        torch.testing.assert_close(grad, expected_grads[name], **EXACT, msg=name)


@pytest.mark.parametrize("mode", ["reentrant", "non_reentrant"])
def test_recomputation_runs_under_the_forward_autocast_state(mode: str) -> None:
    seen: list[tuple[bool, torch.dtype]] = []

    def layer(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        out = x @ weight
        seen.append((torch.is_autocast_enabled("openreg"), out.dtype))
        return out

    x = torch.randn(4, 8, device="openreg", requires_grad=True)
    weight = torch.randn(8, 8, device="openreg", requires_grad=True)
    with torch.autocast("openreg", dtype=torch.bfloat16):
        out = checkpoint(layer, x, weight, use_reentrant=mode == "reentrant")
    out.float().sum().backward()  # outside the region: the recomputation restores it
    assert seen == [(True, torch.bfloat16), (True, torch.bfloat16)]
    assert x.grad.dtype == weight.grad.dtype == torch.float32
