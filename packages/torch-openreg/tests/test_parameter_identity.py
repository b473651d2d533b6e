"""Parameters keep their identity across ``.to()``, as on CUDA.

``nn.Module._apply`` updates Parameters in place (``param.data = moved``) only
when ``torch._has_compatible_shallow_copy_type(old, new)`` is true; otherwise it
replaces them, which unties tied weights and leaves optimizers built before the
move updating the old tensors. openreg answers true between its tensors and the
CPU's (``csrc/kernels/shallow_copy.cpp``). Checked here: the compatibility
table, ``.data`` assignment across devices (dispatch keys, autograd), module
moves both ways, and a GPT-2-style model with ``lm_head.weight = wte.weight``
that trains exactly as on the CPU with its optimizer created before the move.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from torch import nn

EXACT = {"rtol": 0.0, "atol": 0.0}


def test_shallow_copy_compatibility_table() -> None:
    cpu = torch.randn(3)
    device = torch.randn(3, device="openreg")
    other_device = torch.randn(3, device="openreg:1")
    compatible = torch._has_compatible_shallow_copy_type
    assert compatible(cpu, device) and compatible(device, cpu)
    assert compatible(device, other_device)
    # Another TensorImpl type stays incompatible, as on CUDA.
    assert not compatible(device, torch.randn(3, 3).to_sparse())
    assert not compatible(torch.randn(3, 3).to_sparse(), device)
    nested = torch.nested.nested_tensor([torch.randn(2), torch.randn(3)], device="openreg")
    assert not compatible(nested, device)
    assert not compatible(device, nested)


@pytest.mark.parametrize("source", ["cpu", "openreg"])
def test_data_assignment_across_devices(source: str) -> None:
    target = "openreg" if source == "cpu" else "cpu"
    x = torch.zeros(4, device=source, requires_grad=True)
    version = x._version
    x.data = torch.arange(4.0, device=target)
    assert x.device.type == target
    assert x.requires_grad and x.is_leaf
    backend = "PrivateUse1" if target == "openreg" else "CPU"
    autograd = "AutogradPrivateUse1" if target == "openreg" else "AutogradCPU"
    keys = str(torch._C._dispatch_keys(x))
    assert backend in keys and autograd in keys, keys
    assert x._version == version
    (x * x).sum().backward()
    assert x.grad is not None and x.grad.device.type == target
    torch.testing.assert_close(x.grad.cpu(), 2 * torch.arange(4.0), **EXACT)
    # The tensor is a full tensor of its new device: operators run there.
    torch.testing.assert_close((x.detach() + 1).cpu(), torch.arange(4.0) + 1, **EXACT)


def test_module_to_keeps_parameters_and_gradients_both_ways() -> None:
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    params = list(model.parameters())
    model.to("openreg")
    assert all(a is b for a, b in zip(model.parameters(), params, strict=True))
    assert all(p.device.type == "openreg" for p in params)
    model(torch.randn(5, 4, device="openreg")).sum().backward()
    grads = [p.grad for p in params]
    expected = [g.cpu() for g in grads]
    model.to("cpu")
    assert all(a is b for a, b in zip(model.parameters(), params, strict=True))
    for param, grad, want in zip(params, grads, expected, strict=True):
        assert param.grad is grad and grad.device.type == "cpu"
        torch.testing.assert_close(grad, want, **EXACT)
    model.to("openreg:1")
    assert all(p.device == torch.device("openreg:1") for p in params)
    assert all(a is b for a, b in zip(model.parameters(), params, strict=True))


# ---- A tied-weight GPT-2-style model ------------------------------------------


@dataclass(frozen=True)
class DecoderConfig:
    vocab_size: int = 64
    context: int = 16
    width: int = 32
    heads: int = 4
    layers: int = 2


class CausalSelfAttention(nn.Module):
    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.qkv = nn.Linear(config.width, 3 * config.width)
        self.proj = nn.Linear(config.width, config.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        shape = (batch, length, self.heads, width // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(attended.transpose(1, 2).reshape(batch, length, width))


class Block(nn.Module):
    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.width)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.width)
        self.mlp = nn.Sequential(
            nn.Linear(config.width, 4 * config.width),
            nn.GELU(approximate="tanh"),
            nn.Linear(4 * config.width, config.width),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyGPT(nn.Module):
    """GPT-2's shape at toy size: the output projection is the token embedding."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.width)
        self.wpe = nn.Embedding(config.context, config.width)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.ln_f = nn.LayerNorm(config.width)
        self.lm_head = nn.Linear(config.width, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight
        for name, param in self.named_parameters():
            if name.endswith("proj.weight"):  # GPT-2's scaled residual initialisation
                nn.init.normal_(param, std=0.02 / math.sqrt(2 * config.layers))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


OPTIMIZERS: dict[str, Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]] = {
    "sgd-momentum-for-loop": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=False),
    "sgd-foreach": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=True),
    "adam-fused": lambda p: torch.optim.Adam(p, lr=1e-2, fused=True),
    "adamw-foreach": lambda p: torch.optim.AdamW(p, lr=1e-2, foreach=True),
}


def train(
    model: TinyGPT, optimizer: torch.optim.Optimizer, device: str, steps: int = 4
) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    losses = []
    for _ in range(steps):
        tokens = torch.randint(0, 64, (2, 12), generator=generator).to(device)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().cpu())
    return losses


@pytest.mark.parametrize("optimizer_name", OPTIMIZERS)
def test_tied_gpt_trains_like_the_cpu_with_optimizer_built_before_to(optimizer_name: str) -> None:
    torch.manual_seed(0)
    reference = TinyGPT(DecoderConfig())
    model = copy.deepcopy(reference)
    cpu_losses = train(reference, OPTIMIZERS[optimizer_name](reference.parameters()), "cpu")

    params = list(model.parameters())
    optimizer = OPTIMIZERS[optimizer_name](model.parameters())  # before the move
    model.to("openreg")
    assert model.lm_head.weight is model.wte.weight, "the tie came apart"
    assert all(a is b for a, b in zip(model.parameters(), params, strict=True))
    assert all(p.device.type == "openreg" for p in optimizer.param_groups[0]["params"])
    losses = train(model, optimizer, "openreg")

    torch.testing.assert_close(torch.stack(losses), torch.stack(cpu_losses), **EXACT)
    for (name, got), (_, want) in zip(
        model.named_parameters(), reference.named_parameters(), strict=True
    ):
        torch.testing.assert_close(got.detach().cpu(), want.detach(), **EXACT, msg=name)
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                assert value.device.type == "openreg"


def test_tied_gpt_state_dict_and_return_to_cpu() -> None:
    torch.manual_seed(0)
    model = TinyGPT(DecoderConfig())
    expected = {name: value.clone() for name, value in model.state_dict().items()}
    model.to("openreg")
    state = model.state_dict()
    assert state.keys() == expected.keys()
    assert state["lm_head.weight"].data_ptr() == state["wte.weight"].data_ptr()
    for name, value in state.items():
        assert value.device.type == "openreg", name
        torch.testing.assert_close(value.cpu(), expected[name], **EXACT, msg=name)

    # Loading a CPU state dict copies into the openreg parameters in place.
    weight = model.wte.weight
    changed = {name: value + 1 for name, value in expected.items()}
    model.load_state_dict(changed)
    assert model.wte.weight is weight and model.lm_head.weight is weight
    torch.testing.assert_close(weight.detach().cpu(), changed["wte.weight"], **EXACT)

    model.to("cpu")
    assert model.wte.weight is weight and model.lm_head.weight is weight
    assert weight.device.type == "cpu"
    torch.testing.assert_close(weight.detach(), changed["wte.weight"], **EXACT)
