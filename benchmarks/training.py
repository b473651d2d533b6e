"""Family 3: one training step (forward, backward, optimizer step) on openreg over CPU.

The same model (same initial weights, same data) trains on each device with that
device's default optimizer implementation; every openreg step ends with
``torch.openreg.synchronize()``, so a step's time includes all of its device work.
Each model is timed twice: in float32, and with bfloat16 autocast around the forward
pass and the loss — ``torch.autocast("openreg")`` against ``torch.autocast("cpu")``,
each device under its own autocast policy (openreg's is CUDA's).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable

import torch
from torch import nn

from benchmarks.common import MIN_BATCH_SECONDS, Figure, Settings, compare, ratio_figure

TRAINING_RATIO_TARGET = 1.15
BATCH_SECONDS = 0.25  # several steps per timed batch: steps vary a lot on a loaded machine

# (model, optimizer factory, (inputs, targets), loss function)
Workload = tuple[
    nn.Module,
    Callable[[nn.Module], torch.optim.Optimizer],
    tuple[torch.Tensor, torch.Tensor],
    Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
]


def _mlp() -> Workload:
    model = nn.Sequential(
        nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
    )
    g = torch.Generator().manual_seed(1)
    data = (torch.randn(64, 256, generator=g), torch.randint(0, 10, (64,), generator=g))

    def optimizer(m: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)

    return model, optimizer, data, nn.functional.cross_entropy


def _transformer() -> tuple[
    nn.Module, Callable[[nn.Module], torch.optim.Optimizer], tuple, Callable
]:
    layer = nn.TransformerEncoderLayer(
        d_model=128, nhead=4, dim_feedforward=256, dropout=0.1, batch_first=True
    )
    model = nn.Sequential(nn.TransformerEncoder(layer, num_layers=2), nn.Linear(128, 16))
    g = torch.Generator().manual_seed(2)
    data = (torch.randn(16, 32, 128, generator=g), torch.randint(0, 16, (16, 32), generator=g))

    def optimizer(m: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.Adam(m.parameters(), lr=1e-3)

    def loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(output.reshape(-1, 16), target.reshape(-1))

    return model, optimizer, data, loss


class _GPT2Block(nn.Module):
    """A GPT-2 block from torch.nn modules: pre-norm causal self-attention, then a GELU MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
        y = self.ln_1(x)
        x = x + self.attn(y, y, y, attn_mask=causal, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


class _GPT2(nn.Module):
    """GPT-2's shape in miniature: token and position embeddings, blocks, a final norm and
    a language-model head tied to the token embedding (no Hugging Face download)."""

    def __init__(self, vocab: int, width: int, heads: int, layers: int, context: int) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.h = nn.ModuleList(_GPT2Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        causal = torch.triu(torch.ones(context, context, dtype=torch.bool), diagonal=1)
        self.register_buffer("causal", causal)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.h:
            x = block(x, self.causal)
        return self.lm_head(self.ln_f(x))


GPT2_VOCAB = 128


def _gpt2() -> Workload:
    model = _GPT2(vocab=GPT2_VOCAB, width=64, heads=4, layers=2, context=16)
    g = torch.Generator().manual_seed(4)
    data = (
        torch.randint(0, GPT2_VOCAB, (4, 16), generator=g),
        torch.randint(0, GPT2_VOCAB, (4, 16), generator=g),
    )

    def optimizer(m: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.AdamW(m.parameters(), lr=1e-3)

    def loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(output.reshape(-1, GPT2_VOCAB), target.reshape(-1))

    return model, optimizer, data, loss


GPT2_NAME = "GPT-2-style 2x(d64, 4 heads), vocab 128, seq 16, batch 4, AdamW"

MODELS = {
    "MLP 256-512-512-10, batch 64, SGD": _mlp,
    "Transformer encoder 2x(d128, 4 heads), batch 16x32, Adam": _transformer,
}


# Autocast variants: (figure name suffix, autocast dtype or None for float32).
PRECISIONS = (("", None), (", bf16 autocast", torch.bfloat16))


def _step_fn(
    model: nn.Module,
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
    data: tuple[torch.Tensor, torch.Tensor],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    device: str,
    autocast_dtype: torch.dtype | None = None,
) -> Callable[[], None]:
    torch.manual_seed(3)
    model = copy.deepcopy(model).to(device)
    model.train()
    optimizer = make_optimizer(model)
    inputs, target = (t.to(device) for t in data)
    synchronize = torch.openreg.synchronize if device.startswith("openreg") else None
    device_type = torch.device(device).type

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            loss = loss_fn(model(inputs), target)
        loss.backward()
        optimizer.step()
        if synchronize is not None:
            synchronize()

    return step


def run(settings: Settings) -> list[Figure]:
    figures: list[Figure] = []
    for (model_name, make), (suffix, dtype) in itertools.product(MODELS.items(), PRECISIONS):
        name = model_name + suffix
        model, make_optimizer, data, loss_fn = make()
        openreg_step = _step_fn(model, make_optimizer, data, loss_fn, "openreg", dtype)
        cpu_step = _step_fn(model, make_optimizer, data, loss_fn, "cpu", dtype)
        batch = BATCH_SECONDS * settings.min_batch_seconds / MIN_BATCH_SECONDS
        pair = compare(
            openreg_step, cpu_step, torch.openreg.synchronize, settings, warmup=3,
            min_batch_seconds=batch,
        )  # fmt: skip
        raw = {"model": model_name, "autocast": str(dtype) if dtype else "none"}
        figures.append(ratio_figure("3 training step", name, pair, TRAINING_RATIO_TARGET, raw))
        print(f"  training: {name}: openreg {pair.openreg_median * 1e3:.2f} ms, "
              f"cpu {pair.peer_median * 1e3:.2f} ms", flush=True)  # fmt: skip
    return figures
