"""Family 13: replaying captured graphs against launching the same work eagerly.

A graph records a sequence of launches once (``torch.openreg.graph``) and replays it as
one piece of stream work, so the host pays one launch instead of one per operator.
Measured in the same process, interleaved batch by batch (``common.compare``):

* a chain of 200 small operators (1e2 elements each, a cycle of elementwise operators):
  the replay against the same chain launched eagerly on openreg (target 0.5x) and
  against the chain run eagerly on CPU tensors (target 1x);
* a training step (zero_grad, forward, MSE loss, backward, SGD with momentum) of a small
  MLP (16-32-32-4, batch 8), where launching dominates: the replay against the eager
  step on openreg (target 0.8x); and family 3's MLP (256-512-512-10, batch 64), where
  the kernels dominate, for context.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn

from benchmarks.common import Figure, Settings, compare, ratio_figure

FAMILY = "13 graphs"
CHAIN_LENGTH = 200
CHAIN_ELEMENTS = 100
CHAIN_VS_EAGER_TARGET = 0.5
CHAIN_VS_CPU_TARGET = 1.0
STEP_VS_EAGER_TARGET = 0.8

# One step of the chain: elementwise operators that keep values in a modest range.
_CHAIN_OPS: tuple[Callable[[torch.Tensor], torch.Tensor], ...] = (
    lambda t: t * 0.5,
    lambda t: t + 1.0,
    torch.sin,
    lambda t: t - 0.25,
    torch.tanh,
    torch.abs,
    torch.cos,
    lambda t: t.mul(1.5),
)


def chain(x: torch.Tensor) -> torch.Tensor:
    """CHAIN_LENGTH small operators, each on the previous one's result."""
    for index in range(CHAIN_LENGTH):
        x = _CHAIN_OPS[index % len(_CHAIN_OPS)](x)
    return x


def _synchronized(fn: Callable[[], object]) -> Callable[[], None]:
    """``fn`` and then a wait for the device: each call is the whole of its work (both
    sides of an openreg-vs-openreg figure are timed alike)."""

    def run() -> None:
        fn()
        torch.openreg.synchronize()

    return run


def captured(fn: Callable[[], object]) -> tuple[torch.openreg.OpenRegGraph, object]:
    """``fn`` warmed up on a side stream, then captured (as torch.cuda's recipe)."""
    side = torch.openreg.Stream()
    side.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(side):
        for _ in range(3):
            fn()
    torch.openreg.current_stream().wait_stream(side)
    torch.openreg.synchronize()
    graph = torch.openreg.OpenRegGraph()
    with torch.openreg.graph(graph):
        result = fn()
    return graph, result


def _chain_figures(settings: Settings) -> list[Figure]:
    data = torch.randn(CHAIN_ELEMENTS, generator=torch.Generator().manual_seed(0))
    device_x = data.to("openreg")
    graph, static_out = captured(lambda: chain(device_x))
    graph.replay()
    torch.testing.assert_close(static_out.cpu(), chain(data))  # type: ignore[union-attr]
    raw = {"operators": CHAIN_LENGTH, "elements": CHAIN_ELEMENTS}
    replay = _synchronized(graph.replay)
    figures = []
    for name, peer, target in (
        ("eager openreg", _synchronized(lambda: chain(device_x)), CHAIN_VS_EAGER_TARGET),
        ("eager CPU", lambda: chain(data), CHAIN_VS_CPU_TARGET),
    ):
        pair = compare(replay, peer, None, settings)
        label = f"replay of {CHAIN_LENGTH} ops on 1e2 elements / {name}"
        figures.append(ratio_figure(FAMILY, label, pair, target, raw))
        print(f"  graphs: {label}: {pair.openreg_median * 1e6:.1f} µs vs "
              f"{pair.peer_median * 1e6:.1f} µs", flush=True)  # fmt: skip
    return figures


def _small_mlp() -> nn.Module:
    return nn.Sequential(
        nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4)
    )


def _family3_mlp() -> nn.Module:
    return nn.Sequential(
        nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
    )


def _step_figure(
    settings: Settings,
    label: str,
    make: Callable[[], nn.Module],
    batch: tuple[int, int, int],
    target: float | None,
) -> Figure:
    torch.manual_seed(0)
    rows, features, outputs = batch
    model = make().to("openreg")
    eager_model = copy.deepcopy(model)
    x = torch.randn(rows, features, device="openreg")
    target_values = torch.randn(rows, outputs, device="openreg")

    def step_of(net: nn.Module) -> Callable[[], torch.Tensor]:
        optimizer = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)

        def step() -> torch.Tensor:
            optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.mse_loss(net(x), target_values)
            loss.backward()
            optimizer.step()
            return loss

        return step

    graph, _ = captured(step_of(model))
    pair = compare(
        _synchronized(graph.replay), _synchronized(step_of(eager_model)), None, settings, warmup=3
    )
    raw = {"model": label}
    figure = ratio_figure(FAMILY, f"replayed training step / eager openreg, {label}", pair,
                          target, raw)  # fmt: skip
    if target is None:
        figure.kind = "info"
    print(f"  graphs: {label} step: {pair.openreg_median * 1e6:.1f} µs vs "
          f"{pair.peer_median * 1e6:.1f} µs", flush=True)  # fmt: skip
    return figure


def run(settings: Settings) -> list[Figure]:
    figures = _chain_figures(settings)
    figures.append(
        _step_figure(
            settings, "MLP 16-32-32-4, batch 8, SGD", _small_mlp, (8, 16, 4), STEP_VS_EAGER_TARGET
        )
    )
    figures.append(
        _step_figure(
            settings, "MLP 256-512-512-10, batch 64, SGD", _family3_mlp, (64, 256, 10), None
        )
    )
    return figures
