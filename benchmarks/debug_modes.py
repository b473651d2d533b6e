"""Family 10: training steps with openreg's debug modes on, against the same steps with them off.

Both sides run on openreg in the same process, interleaved batch by batch: the same
model and data (``training.MODELS``), float32, each step ending with
``torch.openreg.synchronize()``. The checked side runs every step inside
``torch.openreg.debug.enabled(mode)``. Target for race detection: at most 2x the
unchecked step (issue 19); poison is reported for context.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from benchmarks import training
from benchmarks.common import MIN_BATCH_SECONDS, Figure, Settings, compare, ratio_figure

RACES_RATIO_TARGET = 2.0
TARGETS = {"races": RACES_RATIO_TARGET, "poison": None}


def _checked(step: Callable[[], None], mode: str) -> Callable[[], None]:
    def run() -> None:
        with torch.openreg.debug.enabled(mode):
            step()

    return run


def run(settings: Settings) -> list[Figure]:
    figures: list[Figure] = []
    for model_name, make in training.MODELS.items():
        for mode, target in TARGETS.items():
            model, make_optimizer, data, loss_fn = make()
            plain = training._step_fn(model, make_optimizer, data, loss_fn, "openreg")
            checked = _checked(
                training._step_fn(model, make_optimizer, data, loss_fn, "openreg"), mode
            )
            batch = training.BATCH_SECONDS * settings.min_batch_seconds / MIN_BATCH_SECONDS
            pair = compare(
                checked,
                plain,
                torch.openreg.synchronize,
                settings,
                warmup=3,
                min_batch_seconds=batch,
            )
            name = f"{model_name}, OPENREG_DEBUG={mode} / off"
            raw = {"model": model_name, "mode": mode}
            figure = ratio_figure("10 debug modes", name, pair, target, raw)
            if target is None:
                figure.kind = "info"
            figures.append(figure)
            print(f"  debug modes: {name}: {pair.openreg_median * 1e3:.2f} ms vs "
                  f"{pair.peer_median * 1e3:.2f} ms", flush=True)  # fmt: skip
    return figures
