#!/usr/bin/env python
"""Draw a results file as a PNG: every figure with a target, measured against its target.

    python benchmarks/chart.py [benchmarks/results.json] [benchmarks/results.png]

``run.py`` calls this after every run (``nox -s bench`` writes ``benchmarks/results.png``).
Figures have different units and directions (ratios ≤ or ≥ a target, a difference in
µs, a time in ms), so each is drawn as the share of its budget it uses: measured /
target for "at most" targets, target / measured for "at least" ones. 1 is the target
line; a bar left of it meets the target. The bar's label gives the figure as the table
prints it. Figures without a target (``info``) or not measured (``n/a``) are counted in
the title, not drawn.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `python benchmarks/chart.py` imports the benchmarks package

from benchmarks.common import Figure, format_measured, format_target  # noqa: E402

DEFAULT_RESULTS = ROOT / "benchmarks" / "results.json"
MET, MISSED = "#3a7d44", "#c0392b"


def budget_share(figure: Figure) -> float:
    """How much of its target a figure uses: ≤ 1 meets it, whichever way the target points.

    A difference in µs below zero (openreg faster than the CPU) is drawn at 0.
    """
    assert figure.value is not None and figure.target is not None
    if figure.kind == "ratio_min":
        return figure.target / figure.value if figure.value > 0 else float("inf")
    return max(figure.value, 0.0) / figure.target


def charted(figures: list[Figure]) -> list[Figure]:
    """The figures drawn: measured, with a target."""
    return [f for f in figures if f.status in ("met", "MISSED")]


def load_figures(results: dict[str, Any]) -> list[Figure]:
    fields = Figure.__dataclass_fields__
    return [Figure(**{k: v for k, v in f.items() if k in fields}) for f in results["figures"]]


def render(results: dict[str, Any], output: Path) -> list[Figure]:
    """Draws ``results`` (a parsed results.json) into ``output``; returns the figures drawn."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    from matplotlib import pyplot

    figures = load_figures(results)
    drawn = charted(figures)
    if not drawn:
        raise ValueError("the results have no measured figure with a target: nothing to chart")
    shares = [budget_share(f) for f in drawn]
    limit = max(2.0, min(max(shares), 5.0) * 1.15)
    height = 1.2 + 0.28 * len(drawn)
    canvas, axes = pyplot.subplots(figsize=(11, height), dpi=100)
    rows = range(len(drawn))[::-1]  # first figure at the top, as in the table
    colors = [MET if f.status == "met" else MISSED for f in drawn]
    axes.barh(list(rows), [min(s, limit) for s in shares], color=colors, height=0.7)
    axes.axvline(1.0, color="black", linewidth=1)
    axes.set_yticks(list(rows))
    axes.set_yticklabels([f"{f.family.split(' ', 1)[0]} · {f.name}" for f in drawn], fontsize=8)
    axes.set_xlim(0, limit)
    axes.set_xlabel("share of the target used (measured / target; target / measured for ≥ targets)")
    for row, figure, share in zip(rows, drawn, shares, strict=True):
        label = f"{format_measured(figure)}  (target {format_target(figure)})"
        axes.text(min(share, limit) + limit * 0.01, row, label, va="center", fontsize=7)
    skipped = len(figures) - len(drawn)
    met = sum(f.status == "met" for f in drawn)
    started = results.get("started_at", "unknown time")
    axes.set_title(
        f"OpenReg benchmarks, {started}: {met} of {len(drawn)} targets met"
        + (
            f" ({skipped} figures without a target or not measured are not drawn)"
            if skipped
            else ""
        ),
        fontsize=9,
    )
    canvas.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    canvas.savefig(output)
    pyplot.close(canvas)
    return drawn


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 2:
        raise SystemExit("usage: python benchmarks/chart.py [results.json] [chart.png]")
    results_path = Path(args[0]) if args else DEFAULT_RESULTS
    output = Path(args[1]) if len(args) > 1 else results_path.with_suffix(".png")
    if not results_path.is_file():
        raise SystemExit(f"{results_path} does not exist: run `uv run nox -s bench` first")
    drawn = render(json.loads(results_path.read_text()), output)
    print(f"chart of {len(drawn)} figures written to {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
