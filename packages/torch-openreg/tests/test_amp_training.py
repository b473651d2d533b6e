"""Mixed precision training on openreg against a CPU reference with explicit casts.

Each run trains the same initial weights on the same batches twice: on openreg
under ``torch.autocast("openreg")`` (with ``torch.amp.GradScaler("openreg")``
for float16), and on the CPU without autocast, with CUDA's casts written out
(``_amp_models``) and ``torch.amp.GradScaler("cpu")``. Per-step losses, loss
scales, skipped steps and final parameters must agree. openreg runs the CPU
kernels on the same dtypes in the same order, so the agreement is exact.
"""

from __future__ import annotations

import pytest
import torch
from _amp_models import Recipe, Run, batches, make_model, train

EXACT = {"rtol": 0.0, "atol": 0.0}
STEPS = 6

RECIPES = {
    "fp16-scaler-sgd": Recipe(dtype=torch.float16, scaler=True),
    "fp16-scaler-adam": Recipe(
        dtype=torch.float16, scaler=True, optimizer=lambda p: torch.optim.Adam(p, lr=1e-3)
    ),
    # The fused Adam supports GradScaler natively (no host synchronization in step()).
    "fp16-scaler-fused-adam": Recipe(
        dtype=torch.float16,
        scaler=True,
        optimizer=lambda p: torch.optim.Adam(p, lr=1e-3, fused=True),
    ),
    "bf16-sgd": Recipe(dtype=torch.bfloat16, scaler=False),
}


def assert_same_run(run: Run, reference: Run) -> None:
    assert run.skipped == reference.skipped
    assert run.scales == reference.scales
    torch.testing.assert_close(run.losses, reference.losses, **EXACT)
    assert run.parameters.keys() == reference.parameters.keys()
    for name, value in run.parameters.items():
        assert value.dtype == reference.parameters[name].dtype, name
        torch.testing.assert_close(value, reference.parameters[name], **EXACT, msg=name)


@pytest.mark.parametrize("recipe", RECIPES, ids=str)
@pytest.mark.parametrize("kind", ["mlp", "conv"])
def test_training_matches_cpu_reference(kind: str, recipe: str) -> None:
    model, data = make_model(kind), batches(kind, STEPS)
    run = train(model, data, "openreg", RECIPES[recipe])
    reference = train(model, data, "cpu", RECIPES[recipe])
    assert_same_run(run, reference)
    # The parameters stay float32 (autocast casts copies), and training moved them.
    assert all(
        v.dtype == torch.float32 for k, v in run.parameters.items() if "num_batches" not in k
    )
    initial = make_model(kind).state_dict()
    assert not torch.equal(run.parameters[next(iter(initial))], next(iter(initial.values())))
    assert not all(run.skipped)


@pytest.mark.parametrize("kind", ["mlp", "conv"])
def test_a_step_with_an_inf_gradient_is_skipped_and_the_scale_halves(kind: str) -> None:
    recipe = Recipe(
        dtype=torch.float16,
        scaler=True,
        inject_inf_at=3,
        scaler_options={"init_scale": 1024.0, "growth_interval": 100},
    )
    model, data = make_model(kind), batches(kind, STEPS)
    run = train(model, data, "openreg", recipe)
    assert run.skipped == [False, False, False, True, False, False]
    assert run.scales == [1024.0, 1024.0, 1024.0, 512.0, 512.0, 512.0]
    assert_same_run(run, train(model, data, "cpu", recipe))


def test_scale_grows_after_growth_interval_clean_steps() -> None:
    recipe = Recipe(
        dtype=torch.float16, scaler=True, scaler_options={"init_scale": 8.0, "growth_interval": 2}
    )
    model, data = make_model("mlp"), batches("mlp", 5)
    run = train(model, data, "openreg", recipe)
    assert run.scales == [8.0, 16.0, 16.0, 32.0, 32.0]
    assert_same_run(run, train(model, data, "cpu", recipe))


def test_scaler_state_lives_on_the_device() -> None:
    scaler = torch.amp.GradScaler("openreg", init_scale=256.0)
    loss = torch.ones((), device="openreg", requires_grad=True)
    scaled = scaler.scale(loss)
    assert scaled.device.type == "openreg"
    assert scaler._scale.device.type == "openreg"
    assert scaler._growth_tracker.device.type == "openreg"
    assert scaled.item() == 256.0
    state = scaler.state_dict()
    assert state["scale"] == 256.0
    restored = torch.amp.GradScaler("openreg")
    restored.load_state_dict(state)
    assert restored.get_scale() == 256.0
