"""Small models for the mixed precision tests, with an explicit-cast mode.

Every model's ``forward(x, lower)`` takes ``lower``: ``None`` means "call the
layers normally" (the run under ``torch.autocast``, or a float32 run), a dtype
means "write out the casts CUDA's autocast policy would make" — the CPU
reference of the tests, computed without autocast. So the reference encodes
the documented policy: linear and convolution run in the lower precision dtype,
nll_loss in float32, everything else in the dtype it receives.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

Lower = torch.dtype | None
Batch = tuple[torch.Tensor, torch.Tensor]
OptimizerFactory = Callable[[Iterable[torch.Tensor]], torch.optim.Optimizer]


def cast(tensor: torch.Tensor | None, lower: Lower) -> torch.Tensor | None:
    if tensor is None or lower is None:
        return tensor
    return tensor.to(lower)


def linear(x: torch.Tensor, layer: nn.Linear, lower: Lower) -> torch.Tensor:
    """A lower_precision_fp operator: every input cast to ``lower``."""
    if lower is None:
        return layer(x)
    return F.linear(cast(x, lower), cast(layer.weight, lower), cast(layer.bias, lower))


def conv2d(x: torch.Tensor, layer: nn.Conv2d, lower: Lower) -> torch.Tensor:
    if lower is None:
        return layer(x)
    return F.conv2d(
        cast(x, lower), cast(layer.weight, lower), cast(layer.bias, lower), layer.stride,
        layer.padding,
    )  # fmt: skip


def layer_norm(x: torch.Tensor, layer: nn.LayerNorm, lower: Lower) -> torch.Tensor:
    """An fp32 operator: every input cast to float32 (so is the output)."""
    if lower is None:
        return layer(x)
    return F.layer_norm(
        x.float(), layer.normalized_shape, layer.weight.float(), layer.bias.float(), layer.eps
    )


def matmul(a: torch.Tensor, b: torch.Tensor, lower: Lower) -> torch.Tensor:
    return a @ b if lower is None else cast(a, lower) @ cast(b, lower)


def softmax(x: torch.Tensor, dim: int, lower: Lower) -> torch.Tensor:
    """fp32_set_opt_dtype without an explicit dtype: computed and returned in float32."""
    return torch.softmax(x, dim) if lower is None else torch.softmax(x, dim, dtype=torch.float32)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, lower: Lower) -> torch.Tensor:
    """cross_entropy has no rule; it decomposes into log_softmax and nll_loss.

    Its decomposition passes log_softmax an explicit dtype (the input's), which
    the fp32_set_opt_dtype policy respects: log_softmax runs in the lower
    precision dtype (as on CUDA, observed with fake CUDA tensors), then nll_loss
    (fp32 policy) casts its input to float32.
    """
    if lower is None:
        return F.cross_entropy(logits, target)
    return F.nll_loss(F.log_softmax(cast(logits, lower), 1).float(), target)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor, lower: Lower = None) -> torch.Tensor:
        return linear(F.relu(linear(x, self.fc1, lower)), self.fc2, lower)


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.BatchNorm2d(8)  # no rule: runs in the dtype it receives
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor, lower: Lower = None) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.norm(conv2d(x, self.conv1, lower))), 2)
        x = F.relu(conv2d(x, self.conv2, lower))
        return linear(F.adaptive_avg_pool2d(x, 1).flatten(1), self.fc, lower)


def make_model(kind: str) -> nn.Module:
    torch.manual_seed(0)
    return {"mlp": MLP, "conv": ConvNet, "gpt": lambda: GPT(GPTConfig())}[kind]()


def batches(kind: str, steps: int) -> list[Batch]:
    generator = torch.Generator().manual_seed(1)
    if kind == "gpt":  # next-token prediction on random sequences
        config = GPTConfig()
        sequences = [
            torch.randint(0, config.vocab, (4, config.context + 1), generator=generator)
            for _ in range(steps)
        ]
        return [(s[:, :-1], s[:, 1:].flatten()) for s in sequences]
    shape = {"mlp": (16, 32), "conv": (8, 3, 16, 16)}[kind]
    return [
        (
            torch.randn(*shape, generator=generator),
            torch.randint(0, 10, (shape[0],), generator=generator),
        )
        for _ in range(steps)
    ]


@dataclass
class Run:
    losses: list[torch.Tensor] = field(default_factory=list)
    scales: list[float] = field(default_factory=list)
    parameters: dict[str, torch.Tensor] = field(default_factory=dict)
    skipped: list[bool] = field(default_factory=list)


@dataclass
class Recipe:
    """How to train: autocast dtype, loss scaling, optimizer, an injected inf."""

    dtype: torch.dtype
    scaler: bool
    optimizer: OptimizerFactory = lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)
    inject_inf_at: int | None = None
    scaler_options: dict[str, float] = field(
        default_factory=lambda: {"init_scale": 2.0**16, "growth_interval": 2}
    )


def train(model: nn.Module, data: list[Batch], device: str, recipe: Recipe) -> Run:
    """Trains a copy of ``model``: on openreg under autocast, on the CPU with explicit casts."""
    model = copy.deepcopy(model).to(device)
    optimizer = recipe.optimizer(model.parameters())
    scaler = torch.amp.GradScaler(device, **recipe.scaler_options) if recipe.scaler else None
    use_autocast = device != "cpu"
    lower = None if use_autocast else recipe.dtype
    run = Run()
    for step, (x, y) in enumerate(data):
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        with torch.autocast(device, dtype=recipe.dtype, enabled=use_autocast):
            loss = cross_entropy(model(x, lower), y, lower)
        before = [p.detach().clone() for p in model.parameters()]
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            if step == recipe.inject_inf_at:
                next(iter(model.parameters())).grad.view(-1)[0] = float("inf")
            scaler.step(optimizer)
            scaler.update()
            run.scales.append(scaler.get_scale())
        run.skipped.append(
            all(torch.equal(b, p.detach()) for b, p in zip(before, model.parameters(), strict=True))
        )
        run.losses.append(loss.detach().cpu())
    run.parameters = {name: value.detach().cpu() for name, value in model.state_dict().items()}
    return run


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = 64
    context: int = 16
    width: int = 32
    heads: int = 2
    layers: int = 2


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.qkv = nn.Linear(config.width, 3 * config.width)
        self.proj = nn.Linear(config.width, config.width)
        mask = torch.ones(config.context, config.context, dtype=torch.bool).triu(1)
        self.register_buffer("future", mask, persistent=False)

    def forward(self, x: torch.Tensor, lower: Lower) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = linear(x, self.qkv, lower).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        scores = matmul(q, k.transpose(-2, -1), lower) * (q.shape[-1] ** -0.5)
        scores = scores.masked_fill(self.future[:length, :length], float("-inf"))
        attention = softmax(scores, -1, lower)  # float32 under autocast
        out = matmul(attention, v, lower).transpose(1, 2).reshape(batch, length, width)
        return linear(out, self.proj, lower)


class GPTBlock(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(config.width)
        self.attention = CausalSelfAttention(config)
        self.norm2 = nn.LayerNorm(config.width)
        self.fc = nn.Linear(config.width, 4 * config.width)
        self.out = nn.Linear(4 * config.width, config.width)

    def forward(self, x: torch.Tensor, lower: Lower) -> torch.Tensor:
        # Residual sums add float32 and lower precision: ordinary promotion to float32.
        x = x + self.attention(layer_norm(x, self.norm1, lower), lower)
        hidden = F.gelu(linear(layer_norm(x, self.norm2, lower), self.fc, lower))
        return x + linear(hidden, self.out, lower)


class GPT(nn.Module):
    """A GPT-style decoder built from ``config``, randomly initialised (nothing downloaded)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.tokens = nn.Embedding(config.vocab, config.width)
        self.positions = nn.Embedding(config.context, config.width)
        self.blocks = nn.ModuleList(GPTBlock(config) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, config.vocab)

    def forward(self, tokens: torch.Tensor, lower: Lower = None) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tokens(tokens) + self.positions(positions)
        for block in self.blocks:
            x = block(x, lower)
        logits = linear(layer_norm(x, self.norm, lower), self.head, lower)
        return logits.flatten(0, 1)  # one row of next-token logits per position
