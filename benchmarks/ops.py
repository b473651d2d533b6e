"""Families 1 and 2: per-operator time on openreg over the CPU backend.

Each operator is timed as throughput: a batch of back-to-back calls followed by
``torch.openreg.synchronize()``, divided by the number of calls, after warm-up (the
first call of each new signature runs synchronously by design). The CPU runs the same
call on the same data in the same process, interleaved. Run in the default mode this
is family 1; run in a subprocess with ``OPENREG_FALLBACK=copy`` (the copy-based
fallback, the strategy of PyTorch's reference OpenReg) it is family 2.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from benchmarks.common import TIMES, Figure, Pair, Settings, compare

SIZES = (100, 10_000, 1_000_000)
LARGE_RATIO_TARGET = 1.10  # ops of >= 1e6 elements (and the compute-bound matmul/conv2d)
SMALL_OVERHEAD_TARGET_US = 2.0  # 1e2-element ops: at most this much above the CPU
MEDIUM_ELEMENTWISE_TARGET = 1.5  # 1e4-element elementwise ops (add, mul)
ELEMENTWISE_OPS = ("add", "mul")


def _generator() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _inputs(*tensors: torch.Tensor, device: str) -> tuple[torch.Tensor, ...]:
    return tuple(t.to(device) for t in tensors)


Builder = Callable[[str], Callable[[], torch.Tensor]]


def _elementwise(op: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], n: int) -> Builder:
    g = _generator()
    a, b = torch.randn(n, generator=g), torch.randn(n, generator=g)

    def build(device: str) -> Callable[[], torch.Tensor]:
        x, y = _inputs(a, b, device=device)
        return lambda: op(x, y)

    return build


def _softmax(n: int) -> Builder:
    rows = math.isqrt(n) if n >= 10_000 else 1  # (1, 100), (100, 100), (1000, 1000)
    source = torch.randn(rows, n // rows, generator=_generator())

    def build(device: str) -> Callable[[], torch.Tensor]:
        (x,) = _inputs(source, device=device)
        return lambda: torch.softmax(x, dim=-1)

    return build


def _sum(n: int) -> Builder:
    source = torch.randn(n, generator=_generator())

    def build(device: str) -> Callable[[], torch.Tensor]:
        (x,) = _inputs(source, device=device)
        return lambda: x.sum()

    return build


def _index_select(n: int) -> Builder:
    g = _generator()
    source = torch.randn(n, generator=g)
    index = torch.randint(0, n, (n,), generator=g)

    def build(device: str) -> Callable[[], torch.Tensor]:
        x, i = _inputs(source, index, device=device)
        return lambda: torch.index_select(x, 0, i)

    return build


def _matmul() -> Builder:
    g = _generator()
    a, b = torch.randn(512, 512, generator=g), torch.randn(512, 512, generator=g)

    def build(device: str) -> Callable[[], torch.Tensor]:
        x, y = _inputs(a, b, device=device)
        return lambda: x @ y

    return build


def _conv2d() -> Builder:
    g = _generator()
    image = torch.randn(8, 3, 64, 64, generator=g)
    weight = torch.randn(16, 3, 3, 3, generator=g)
    bias = torch.randn(16, generator=g)

    def build(device: str) -> Callable[[], torch.Tensor]:
        x, w, b = _inputs(image, weight, bias, device=device)
        return lambda: torch.nn.functional.conv2d(x, w, b, padding=1)

    return build


def cases() -> list[tuple[str, int, Builder]]:
    """(operator, elements, builder) for every measured case."""
    found: list[tuple[str, int, Builder]] = []
    for n in SIZES:
        found += [
            ("add", n, _elementwise(torch.add, n)),
            ("mul", n, _elementwise(torch.mul, n)),
            ("softmax", n, _softmax(n)),
            ("sum", n, _sum(n)),
            ("index_select", n, _index_select(n)),
        ]
    found.append(("matmul 512x512", 512 * 512, _matmul()))
    found.append(("conv2d 8x3x64x64 -> 16ch", 8 * 16 * 64 * 64, _conv2d()))
    return found


def _check_same_result(
    device_fn: Callable[[], torch.Tensor], cpu_fn: Callable[[], torch.Tensor]
) -> None:
    expected, got = cpu_fn(), device_fn().cpu()
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def _figure(op: str, n: int, pair: Pair, family: str, mode: str, processes: int = 1) -> Figure:
    """The row of one case: its target depends on the size and on the fallback mode."""
    raw = {"op": op, "elements": n, "fallback_mode": mode, "processes": processes, **pair.raw()}
    fixed_size = op.startswith(("matmul", "conv2d"))
    label = op if fixed_size else f"{op} n=1e{len(str(n)) - 1}"
    if mode != "inplace":
        kind, target, value = "info", None, pair.paired_ratio
    elif n >= 1_000_000 or fixed_size:
        kind, target, value = "ratio_max", LARGE_RATIO_TARGET, pair.paired_ratio
    elif n <= 100:
        kind, target = "abs_us_max", SMALL_OVERHEAD_TARGET_US
        value = pair.paired_difference * 1e6
    elif op in ELEMENTWISE_OPS:
        kind, target, value = "ratio_max", MEDIUM_ELEMENTWISE_TARGET, pair.paired_ratio
    else:
        kind, target, value = "info", None, pair.paired_ratio
    return Figure(
        family=family,
        name=label,
        kind=kind,
        value=value,
        target=target,
        openreg=pair.openreg_median,
        peer=pair.peer_median,
        note=f"ratio {pair.paired_ratio:.2f}{TIMES}" if kind == "abs_us_max" else "",
        raw=raw,
    )


def run(settings: Settings, family: str, mode: str) -> list[Figure]:
    """Time every case; ``family`` labels the figures, ``mode`` is the fallback mode."""
    figures: list[Figure] = []
    sync = torch.openreg.synchronize
    for op, n, build in cases():
        cpu_fn, device_fn = build("cpu"), build("openreg")
        _check_same_result(device_fn, cpu_fn)  # we time real work, and the right one
        pair = compare(device_fn, cpu_fn, sync, settings)
        figure = _figure(op, n, pair, family, mode)
        figures.append(figure)
        print(f"  {family}: {figure.name}: openreg {pair.openreg_median * 1e6:.2f} µs, "
              f"cpu {pair.peer_median * 1e6:.2f} µs", flush=True)  # fmt: skip
    return figures


def pool(runs: list[list[Figure]]) -> list[Figure]:
    """One figure per case from the repeats of several processes, as if one had made them all.

    Each process pairs its own openreg and CPU batches; what varies between processes
    (where memory landed, the state of the OpenMP teams) moves both sides of one process
    together but differs from process to process, so pooling keeps one unlucky process
    from deciding a figure."""
    pooled: list[Figure] = []
    for same_case in zip(*runs, strict=True):
        first = same_case[0].raw
        pair = Pair(
            openreg=[t for f in same_case for t in f.raw["openreg_seconds"]],
            peer=[t for f in same_case for t in f.raw["peer_seconds"]],
            calls=first["calls_per_batch"],
        )
        family, mode = same_case[0].family, first["fallback_mode"]
        pooled.append(_figure(first["op"], first["elements"], pair, family, mode, len(runs)))
    return pooled
