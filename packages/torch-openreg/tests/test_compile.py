"""torch.compile on openreg: Dynamo's device interface and Inductor's openreg backend.

Compiling is slow here (Inductor builds C++ with g++ on two shared cores), so the
suite compiles few, small models: each model is compiled once per device and
configuration, and the eager/CPU references are cheap. Differential checks compare
compiled openreg with compiled CPU and with eager openreg.
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from _async import held_stream, warm
from torch import nn

ATOL = 1e-5
RTOL = 1e-4


# ---- models (small; nothing downloaded) -------------------------------------------


def mlp() -> tuple[nn.Module, Callable[[int], torch.Tensor]]:
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))
    return model, lambda batch: torch.randn(batch, 16)


def conv_net() -> tuple[nn.Module, Callable[[int], torch.Tensor]]:
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(8 * 4 * 4, 10),
    )
    return model, lambda batch: torch.randn(batch, 3, 8, 8)


def transformer() -> tuple[nn.Module, Callable[[int], torch.Tensor]]:
    layer = nn.TransformerEncoderLayer(
        d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True
    )
    model = nn.Sequential(nn.TransformerEncoder(layer, num_layers=1), nn.Linear(32, 5))
    return model, lambda batch: torch.randn(batch, 6, 32)


@dataclass(frozen=True)
class TinyConfig:
    """A decoder-only language model described by a config, as model hubs do."""

    vocab_size: int = 50
    hidden: int = 32
    heads: int = 4
    layers: int = 2
    max_positions: int = 16


class TinyBlock(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(config.hidden)
        self.qkv = nn.Linear(config.hidden, 3 * config.hidden)
        self.proj = nn.Linear(config.hidden, config.hidden)
        self.norm2 = nn.LayerNorm(config.hidden)
        self.mlp = nn.Sequential(
            nn.Linear(config.hidden, 4 * config.hidden),
            nn.GELU(approximate="tanh"),
            nn.Linear(4 * config.hidden, config.hidden),
        )
        self.heads = config.heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, hidden = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(hidden, dim=-1)
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attention = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attention.transpose(1, 2).reshape(batch, length, hidden))
        return x + self.mlp(self.norm2(x))


class TinyLanguageModel(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.tokens = nn.Embedding(config.vocab_size, config.hidden)
        self.positions = nn.Embedding(config.max_positions, config.hidden)
        self.blocks = nn.ModuleList(TinyBlock(config) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.hidden)
        self.head = nn.Linear(config.hidden, config.vocab_size, bias=False)
        self.tie_weights()

    def tie_weights(self) -> None:
        """The output projection shares the token embedding (as in GPT-2).

        Called again after moving to openreg: Module.to() keeps parameter identity
        (and so ties) only for devices PyTorch lists as compatible with the CPU,
        which PrivateUse1 devices are not yet.
        """
        self.head.weight = self.tokens.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.tokens(ids) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def tiny_language_model() -> tuple[nn.Module, Callable[[int], torch.Tensor]]:
    config = TinyConfig()
    return TinyLanguageModel(config), lambda batch: torch.randint(0, config.vocab_size, (batch, 8))


MODELS = {
    "mlp": mlp,
    "conv": conv_net,
    "transformer": transformer,
    "tiny_lm": tiny_language_model,
}


# ---- training runs ----------------------------------------------------------------


@dataclass
class Run:
    outputs: list[torch.Tensor]
    parameters: list[torch.Tensor]
    gradients: list[torch.Tensor]


def train(
    name: str, device: str, compiled: bool, batches: tuple[int, ...], dynamic: bool | None = None
) -> Run:
    """A few SGD steps (forward, backward, step); results copied to the CPU."""
    torch.manual_seed(0)
    model, make_input = MODELS[name]()
    model = copy.deepcopy(model).to(device)
    if isinstance(model, TinyLanguageModel):
        model.tie_weights()
    model.train()
    step_model = torch.compile(model, dynamic=dynamic) if compiled else model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    outputs = []
    for step, batch in enumerate(batches):
        torch.manual_seed(100 + step)
        inputs = make_input(batch).to(device)
        output = step_model(inputs)
        loss = output.float().pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        outputs.append(output.detach().cpu())
    return Run(
        outputs=outputs,
        parameters=[p.detach().cpu() for p in model.parameters()],
        gradients=[p.grad.detach().cpu() for p in model.parameters()],
    )


def assert_same(actual: Run, expected: Run) -> None:
    for got, want in zip(actual.outputs, expected.outputs, strict=True):
        torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)
    for got, want in zip(actual.gradients, expected.gradients, strict=True):
        torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)
    for got, want in zip(actual.parameters, expected.parameters, strict=True):
        torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)


STATIC_BATCHES = (4, 4, 4)
DYNAMIC_BATCHES = (4, 6, 3)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_compiled_training_matches_cpu_and_eager(name: str) -> None:
    """Forward, backward (AOTAutograd) and SGD steps: compiled openreg == compiled CPU
    == eager openreg."""
    compiled_openreg = train(name, "openreg", True, STATIC_BATCHES)
    assert_same(compiled_openreg, train(name, "cpu", True, STATIC_BATCHES))
    assert_same(compiled_openreg, train(name, "openreg", False, STATIC_BATCHES))


@pytest.mark.parametrize("name", ["mlp", "tiny_lm"])
def test_dynamic_shapes(name: str) -> None:
    """dynamic=True: one graph for every batch size (sizes reach kernels as int64 arguments)."""
    torch._dynamo.utils.counters.clear()
    compiled_openreg = train(name, "openreg", True, DYNAMIC_BATCHES, dynamic=True)
    assert_same(compiled_openreg, train(name, "cpu", False, DYNAMIC_BATCHES))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


def test_max_autotune_mode() -> None:
    torch.manual_seed(0)
    model, make_input = mlp()
    model.eval()
    inputs = make_input(8)
    expected = model(inputs)
    device_model = copy.deepcopy(model).to("openreg")
    compiled = torch.compile(device_model, mode="max-autotune-no-cudagraphs")
    with torch.no_grad():
        got = compiled(inputs.to("openreg"))
    torch.testing.assert_close(got.cpu(), expected.detach(), atol=ATOL, rtol=RTOL)


# ---- execution on streams ---------------------------------------------------------


def _pointwise(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x * 2 + y).sin() * y


@pytest.fixture(scope="module")
def pointwise() -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """One compiled graph of a single fused C++ kernel, shared by the stream tests."""
    compiled = torch.compile(_pointwise)
    x, y = torch.randn(1000, device="openreg"), torch.randn(1000, device="openreg")
    compiled(x, y)  # compile now, for two distinct inputs as the tests pass them
    torch.openreg.synchronize()
    return compiled


def test_compiled_kernels_are_queued_on_the_stream(
    pointwise: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> None:
    """The call returns while the kernel still waits behind earlier work."""
    x = torch.randn(1000).to("openreg")
    y = torch.randn(1000).to("openreg")
    stream = torch.openreg.current_stream()
    torch.openreg.synchronize()
    with held_stream(stream):
        result = pointwise(x, y)
        assert not stream.query()  # the host did not wait for the kernel
    torch.testing.assert_close(result.cpu(), _pointwise(x.cpu(), y.cpu()))
    assert stream.query()


def test_compiled_and_eager_work_on_two_streams(
    pointwise: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> None:
    """Eager producer on one stream, compiled consumer on another, ordered by events,
    and back: every result sees its inputs complete."""
    side = torch.openreg.Stream()
    main = torch.openreg.current_stream()
    base = torch.randn(1000)
    x = base.to("openreg")
    warm(lambda: x * 3, lambda: x + 1)  # the eager calls below are then asynchronous
    expected = _pointwise(base, base * 3)
    with held_stream(main) as producer_late:  # the producer runs late on the main stream
        y = x * 3
        produced = main.record_event()
        with torch.openreg.stream(side):
            side.wait_event(produced)
            z = pointwise(x, y)  # compiled, on the side stream
            consumed = side.record_event()
        with held_stream(side):  # later side work must not matter
            main.wait_event(consumed)
            w = z + 1  # eager, on the main stream
            z.record_stream(main)
            producer_late.release()
            torch.testing.assert_close(w.cpu(), expected + 1)


def test_compiled_kernel_on_second_device(
    pointwise: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> None:
    x = torch.randn(1000)
    result = pointwise(x.to("openreg:1"), x.to("openreg:1"))
    assert result.device == torch.device("openreg", 1)
    torch.testing.assert_close(result.cpu(), _pointwise(x, x))


def test_error_in_compiled_kernel_surfaces_at_synchronization() -> None:
    """An out-of-range index inside a compiled kernel fails like an eager kernel:
    not at the call, but at the next synchronizing call, with the kernel's message."""

    def gather(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return table[index] * 2

    compiled = torch.compile(gather)
    table = torch.randn(10, device="openreg")
    good = torch.tensor([1, 2, 3], device="openreg")
    torch.testing.assert_close(compiled(table, good).cpu(), table.cpu()[good.cpu()] * 2)
    bad = torch.tensor([1, 2, 30], device="openreg")
    with held_stream():
        result = compiled(table, bad)  # queued: no error yet
    with pytest.raises(RuntimeError, match="index out of bounds"):
        torch.openreg.synchronize()
    del result
    # The device keeps working after the failure was reported.
    torch.testing.assert_close(compiled(table, good).cpu(), table.cpu()[good.cpu()] * 2)


# ---- Dynamo: devices, streams and events in traced code ---------------------------


def test_device_interface_is_registered() -> None:
    from torch._dynamo.device_interface import get_interface_for_device

    interface = get_interface_for_device("openreg")
    assert interface.device_count() == torch.openreg.device_count()
    assert interface.is_available()
    assert interface.Stream is torch.openreg.Stream
    assert interface.Event is torch.openreg.Event
    properties = interface.Worker.get_device_properties("openreg:1")
    assert properties.name == torch.openreg.get_device_name(1)
    assert properties.total_memory == torch.openreg.mem_get_info(1)[1]
    assert isinstance(interface.get_raw_stream(0), int)
    assert not interface.is_gpu()


def _streams_and_events(
    x: torch.Tensor, side: torch.Stream, event: torch.Event
) -> tuple[torch.Tensor, int]:
    y = x * 2
    event.record()
    with torch.openreg.stream(side):
        side.wait_event(event)
        z = y + 1
    torch.openreg.current_stream().wait_stream(side)
    return z * 3, torch.openreg.device_count()


def test_stream_and_event_code_compiles_without_graph_breaks() -> None:
    compiled = torch.compile(_streams_and_events, fullgraph=True)
    x = torch.randn(64, device="openreg")
    result, count = compiled(x, torch.openreg.Stream(), torch.openreg.Event())
    assert count == torch.openreg.device_count()
    torch.testing.assert_close(result.cpu(), (x.cpu() * 2 + 1) * 3)


def test_device_queries_trace_without_graph_breaks() -> None:
    """Device queries fold to constants (guarded where they can change) and
    synchronize becomes a graph node, as for torch.cuda; torch.accelerator too."""

    def queries(x: torch.Tensor) -> torch.Tensor:
        assert torch.openreg.is_available()
        y = x * torch.openreg.device_count() + torch.openreg.current_device()
        torch.openreg.synchronize()
        torch.openreg.current_stream().synchronize()
        torch.accelerator.current_stream().synchronize()
        torch.accelerator.synchronize()
        return y

    compiled = torch.compile(queries, backend="eager", fullgraph=True)
    x = torch.ones(4, device="openreg")
    torch.testing.assert_close(compiled(x).cpu(), queries(x).cpu())


# ---- autocast (issue 14) ----------------------------------------------------------


def test_compile_with_autocast() -> None:
    torch.manual_seed(0)
    model, make_input = mlp()
    inputs = make_input(8)

    def run(device: str, compiled: bool) -> torch.Tensor:
        device_model = copy.deepcopy(model).to(device)
        step = torch.compile(device_model) if compiled else device_model
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            output = step(inputs.to(device))
        assert output.dtype == torch.bfloat16
        return output.float().cpu()

    torch.testing.assert_close(run("openreg", True), run("openreg", False), atol=2e-2, rtol=2e-2)


# ---- processes: lazy registration, compile workers, the FX graph cache ------------


@pytest.mark.child_interpreters
def test_registration_waits_for_dynamo(
    run_python: Callable[..., subprocess.CompletedProcess],
) -> None:
    """``import torch_openreg`` imports neither Dynamo nor Inductor; importing Dynamo
    registers the device interface."""
    result = run_python(
        """
        import importlib.util, json, sys
        import torch, torch_openreg
        before = [m for m in ("torch._dynamo", "torch._inductor") if m in sys.modules]
        assert importlib.util.find_spec("torch._dynamo") is not None  # a probe, no import
        from torch._dynamo.device_interface import get_interface_for_device
        print(json.dumps({"before": before,
                          "interface": get_interface_for_device("openreg").__name__}))
        """
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == {
        "before": [],
        "interface": "OpenRegInterface",
    }


COMPILE_IN_CHILD = """
import json, torch, torch_openreg
from torch._dynamo.utils import counters
def f(x):
    return torch.nn.functional.gelu(x * 3 - 1).sum(dim=0)
x = torch.linspace(-2, 2, 64).reshape(8, 8)
result = torch.compile(f)(x.to("openreg")).cpu()
torch.testing.assert_close(result, f(x))
print(json.dumps({"hits": counters["inductor"]["fxgraph_cache_hit"],
                  "misses": counters["inductor"]["fxgraph_cache_miss"]}))
"""


@pytest.mark.child_interpreters
def test_compile_workers_in_subprocesses(
    run_python: Callable[..., subprocess.CompletedProcess], tmp_path: object
) -> None:
    """With a subprocess compile pool, kernels are built asynchronously and the
    wrapper waits for them (the future path of kernels.load_kernel)."""
    result = run_python(
        COMPILE_IN_CHILD,
        timeout=600,
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path),
        TORCHINDUCTOR_COMPILE_THREADS="2",
        TORCHINDUCTOR_WORKER_START="subprocess",
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.child_interpreters
def test_fx_graph_cache_is_reused_by_another_process(
    run_python: Callable[..., subprocess.CompletedProcess], tmp_path: object
) -> None:
    environment = {
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path),
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
    }
    first = run_python(COMPILE_IN_CHILD, timeout=600, **environment)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout.splitlines()[-1]) == {"hits": 0, "misses": 1}
    second = run_python(COMPILE_IN_CHILD, timeout=600, **environment)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout.splitlines()[-1]) == {"hits": 1, "misses": 0}


def kernel_build_commands(device: str) -> list[str]:
    """Compiler command lines Inductor runs to build a small kernel for ``device``."""
    from torch._inductor import cpp_builder
    from torch._inductor.utils import fresh_cache

    commands: list[str] = []
    build = cpp_builder.CppBuilder.build

    def recording_build(builder: cpp_builder.CppBuilder) -> None:
        commands.append(builder.get_command_line())
        build(builder)

    torch._dynamo.reset()
    with (
        pytest.MonkeyPatch.context() as patch,
        torch._inductor.config.patch(compile_threads=1),
        fresh_cache(),
    ):
        patch.setattr(cpp_builder.CppBuilder, "build", recording_build)
        x = torch.linspace(-1, 1, 32, device=device)
        torch.compile(lambda t: (t * 3).tanh() + 1)(x).sum().item()
    # Kernel libraries only (not the instruction-set probes or the header build).
    return [command for command in commands if ".main.cpp" in command]


def test_kernels_are_built_with_the_cpu_kernels_precompiled_header() -> None:
    # Without Inductor's precompiled cpp_prefix.h each openreg kernel took about three
    # times as long to build as the same CPU kernel (issue 16's compile-time target).
    for device in ("cpu", "openreg"):
        commands = kernel_build_commands(device)
        assert commands, device
        assert all("precompiled_headers" in command for command in commands), (device, commands)
