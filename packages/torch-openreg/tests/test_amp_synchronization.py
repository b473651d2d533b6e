"""GradScaler on openreg waits for the device no more often than on CUDA.

The host's waits are counted exactly: ``_host_waits.c``, preloaded in front of
libopenreg.so, counts every runtime call that blocks the host until device work
is done (stream/event/device synchronization, synchronous copies and fills).
What CUDA would wait for in the same Python code is counted alongside by a
dispatch mode that sees every operator reaching the device: CUDA blocks the
host for a value read back (``.item()``: ``_local_scalar_dense``), a copy to
host memory, and operators whose output size depends on the data
(``nonzero``, ``masked_select``, ``unique``).

Counts are per phase of a training step, after two warm-up steps (an operator's
first call on openreg runs synchronously once to learn its output layout,
docs/op-execution.md). torch's GradScaler reads ``found_inf`` back once in
``step()`` (``_maybe_opt_step``) unless the optimizer applies the scale itself
(fused Adam): openreg must show the same count, so unscaling, the inf/NaN check
and the scale update are queued on the stream like any kernel.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import clean_environment

import openreg_runtime

HERE = Path(__file__).parent
# Steps before the counts are compared: SGD's momentum buffers are created in the
# first step and updated by other operators from the second on, each operator's
# first call learning its layout synchronously.
WARMUP = 2

SCRIPT = r"""
import ctypes, json, os
import torch
import torch_openreg  # the test environments have no autoload shim
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

host_waits = ctypes.CDLL(os.environ["LD_PRELOAD"]).openreg_host_waits
host_waits.restype = ctypes.c_long
DATA_DEPENDENT = {"nonzero", "masked_select", "_unique2", "unique_consecutive", "unique_dim"}


class CudaWaits(TorchDispatchMode):
    # Operators after which CUDA's host would wait for the device.
    count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name == "_local_scalar_dense" or name in DATA_DEPENDENT:
            CudaWaits.count += 1
        elif name in ("_to_copy", "copy_"):
            target = kwargs.get("device") if name == "_to_copy" else args[0].device
            if target is not None and torch.device(target).type == "cpu":
                CudaWaits.count += 1
        return func(*args, **kwargs)


def counts():
    return host_waits(), CudaWaits.count


# The counter must see waits at all, or zero counts below would prove nothing.
x = torch.randn(8, device="openreg")
(x * 2).sum().item()
before = host_waits()
x.sum().item()
torch.openreg.synchronize()
sanity = host_waits() - before

torch.manual_seed(0)
results = {"sanity": sanity}
for name, make in [
    ("sgd", lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9)),
    ("fused_adam", lambda p: torch.optim.Adam(p, lr=1e-3, fused=True)),
]:
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)
    ).to("openreg")
    optimizer = make(model.parameters())
    scaler = torch.amp.GradScaler("openreg", init_scale=1024.0)
    x = torch.randn(16, 32, device="openreg")
    y = torch.randint(0, 10, (16,), device="openreg")
    steps = []
    for step in range(5):
        phases = {}
        with CudaWaits():
            mark = counts()

            def phase(label):
                global mark
                now = counts()
                phases[label] = [now[0] - mark[0], now[1] - mark[1]]
                mark = now

            optimizer.zero_grad()
            with torch.autocast("openreg", dtype=torch.float16):
                loss = F.cross_entropy(model(x), y)
            phase("forward")
            scaler.scale(loss).backward()
            phase("backward")
            scaler.unscale_(optimizer)
            phase("unscale_")
            scaler.step(optimizer)
            phase("step")
            scaler.update()
            phase("update")
        steps.append(phases)
    results[name] = steps
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def host_wait_counter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("cc")
    assert compiler, "counting host waits needs a C compiler (cc) to build tests/_host_waits.c"
    library = tmp_path_factory.mktemp("host_waits") / "libhostwaits.so"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-Wall", "-Werror",
         f"-I{openreg_runtime.get_include()}", str(HERE / "_host_waits.c"),
         "-o", str(library), "-ldl"],
        check=True,
    )  # fmt: skip
    return library


@pytest.fixture(scope="module")
def measured(host_wait_counter: Path) -> dict:
    # In a fresh interpreter: the counter must be preloaded before the runtime loads.
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env=clean_environment(LD_PRELOAD=str(host_wait_counter)),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_counter_sees_host_waits(measured: dict) -> None:
    # .item() and synchronize() both wait: the interposition is in place.
    assert measured["sanity"] >= 2


@pytest.mark.parametrize("optimizer", ["sgd", "fused_adam"])
def test_openreg_waits_exactly_where_cuda_waits(measured: dict, optimizer: str) -> None:
    for step, phases in enumerate(measured[optimizer][WARMUP:], start=WARMUP):
        for phase, (openreg_waits, cuda_waits) in phases.items():
            assert openreg_waits == cuda_waits, (
                f"{optimizer}, step {step}, {phase}: openreg waited {openreg_waits} times "
                f"for the device, CUDA would wait {cuda_waits} times"
            )


@pytest.mark.parametrize(
    ("optimizer", "step_waits"),
    [("sgd", 1), ("fused_adam", 0)],
)
def test_grad_scaler_phases_queue_on_the_stream(
    measured: dict, optimizer: str, step_waits: int
) -> None:
    # unscale_ (inf/NaN check) and update (scale update) never wait; step()
    # waits once to read found_inf, unless the fused optimizer applies it itself.
    for phases in measured[optimizer][WARMUP:]:
        assert {phase: waits[0] for phase, waits in phases.items()} == {
            "forward": 0,
            "backward": 0,
            "unscale_": 0,
            "step": step_waits,
            "update": 0,
        }
