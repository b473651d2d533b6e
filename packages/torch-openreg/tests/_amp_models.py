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
    return {"mlp": MLP, "conv": ConvNet}[kind]()


def batches(kind: str, steps: int) -> list[Batch]:
    generator = torch.Generator().manual_seed(1)
    shape = {"mlp": (16, 32), "conv": (8, 3, 16, 16)}[kind]
    return [
        (torch.randn(*shape, generator=generator), torch.randint(0, 10, (shape[0],), generator=generator))
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
    optimizer: OptimizerFactory = lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)  # noqa: E731
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
