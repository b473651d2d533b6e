"""torch.utils.checkpoint on openreg, with and without autocast.

Checkpointing drops activations in the forward pass and recomputes them in the
backward pass, which runs outside the autocast region: torch records the
device's autocast state (and its RNG state, for dropout) at forward time and
restores both for the recomputation. A device whose autocast state or RNG
state were not restored would recompute different activations (float32
instead of float16, other dropout masks), so the gradients of a checkpointed
model must equal those of the same model run without checkpointing, exactly.

Binding fixes make this hold, and are tested here: dropout draws from the
openreg generator (csrc/kernels/dropout.cpp), torch.openreg._initialized tells
checkpoint to save the device's RNG state, and reading or setting that state
waits for queued kernels without holding the GIL.
"""

from __future__ import annotations

import faulthandler
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

EXACT = {"rtol": 0.0, "atol": 0.0}
# A deadlock here would hang the whole test run: end the process with a traceback instead.
HANG_LIMIT_SECONDS = 300


@pytest.fixture(autouse=True)
def _fail_instead_of_hanging() -> Iterator[None]:
    faulthandler.dump_traceback_later(HANG_LIMIT_SECONDS, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def test_rng_state_access_under_saved_tensor_hooks_does_not_deadlock(run_python) -> None:
    # Non-reentrant checkpoint sets the device's RNG state while kernels launched
    # under its (Python) saved-tensor hooks are still queued. When kernels restored
    # the caller's thread-local state (hooks included, which needs the GIL), this hung
    # in 5 of 5 runs unless the wait released the GIL; kept as a regression test.
    result = run_python(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import torch
        import torch_openreg  # the test environments have no autoload shim
        from torch.utils.checkpoint import checkpoint
        from _async import held_stream
        x = torch.randn(64, 64, device="openreg", requires_grad=True)
        with held_stream() as held:
            held.release_soon()  # the work queued from here waits until the host waits
            out = checkpoint(lambda t: torch.nn.functional.dropout(t @ t, 0.5).sin(), x,
                             use_reentrant=False)
            out.sum().backward()
        print("done")
        """,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "done"


def test_dropout_draws_from_the_openreg_generator() -> None:
    x = torch.ones(256, device="openreg")
    torch.openreg.manual_seed(5)
    first = F.dropout(x, 0.5)
    torch.default_generator.manual_seed(99)  # the CPU's generator plays no part
    torch.openreg.manual_seed(5)
    again = F.dropout(x, 0.5)
    torch.testing.assert_close(first.cpu(), again.cpu(), **EXACT)
    state = torch.openreg.get_rng_state()
    following = F.dropout(x, 0.5)
    assert not torch.equal(following.cpu(), first.cpu())
    torch.openreg.set_rng_state(state)
    torch.testing.assert_close(F.dropout(x, 0.5).cpu(), following.cpu(), **EXACT)
    # The engine is the CPU's algorithm: the same seed gives the CPU's mask.
    torch.default_generator.manual_seed(5)
    torch.testing.assert_close(first.cpu(), F.dropout(torch.ones(256), 0.5), **EXACT)
    assert 0 < int((first == 0).sum()) < 256


@pytest.mark.parametrize(("p", "train"), [(0.0, True), (1.0, True), (0.3, False)])
def test_dropout_edge_cases_match_cpu(p: float, train: bool) -> None:
    x = torch.randn(32)
    torch.manual_seed(3)
    out, mask = torch.native_dropout(x.to("openreg"), p, train)
    torch.manual_seed(3)
    expected_out, expected_mask = torch.native_dropout(x, p, train)
    torch.testing.assert_close(out.cpu(), expected_out, **EXACT)
    torch.testing.assert_close(mask.cpu(), expected_mask, **EXACT)
    empty_out, empty_mask = torch.native_dropout(torch.ones(0, device="openreg"), 0.5, True)
    assert empty_out.shape == empty_mask.shape == (0,)


def test_device_module_reports_initialised() -> None:
    # torch.utils.checkpoint saves the device RNG state only when this is true.
    torch.ones(1, device="openreg")
    assert torch.openreg._initialized is True


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
        # sin saves its input: the backward needs the recomputation. (Non-reentrant
        # recomputation stops once the last saved tensor is recomputed: record before.)
        return out.sin()

    x = torch.randn(4, 8, device="openreg", requires_grad=True)
    weight = torch.randn(8, 8, device="openreg", requires_grad=True)
    with torch.autocast("openreg", dtype=torch.bfloat16):
        out = checkpoint(layer, x, weight, use_reentrant=mode == "reentrant")
    out.float().sum().backward()  # outside the region: the recomputation restores it
    assert seen == [(True, torch.bfloat16), (True, torch.bfloat16)]
    assert x.grad.dtype == weight.grad.dtype == torch.float32
