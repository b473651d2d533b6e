"""PyTorch's profiler on openreg: Kineto device events and the legacy path.

A profiled training step must show, per operator that launched stream work,
one device event (kernel or copy) on the lane of its device and stream, timed
on the worker, linked to that operator (so ``key_averages()`` reports device
time) and joined to the host's launch by a flow arrow in the chrome trace.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def training_step(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    inputs = torch.randn(16, 32).to("openreg")
    targets = torch.randint(0, 4, (16,)).to("openreg")
    loss = F.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    loss.item()


def make_model() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to("openreg")
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def exported_trace(prof: Any, directory: Path) -> list[dict[str, Any]]:
    path = directory / "trace.json"
    prof.export_chrome_trace(str(path))
    return json.loads(path.read_text())["traceEvents"]


@pytest.fixture(scope="module")
def step_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, list[dict[str, Any]]]:
    model, optimizer = make_model()
    training_step(model, optimizer)  # warm-up: plans and caches outside the profile
    with profile(activities=ACTIVITIES) as prof:
        training_step(model, optimizer)
    return prof, exported_trace(prof, tmp_path_factory.mktemp("profile"))


def by_category(events: list[dict[str, Any]], category: str) -> list[dict[str, Any]]:
    return [event for event in events if event.get("cat") == category and event.get("ph") == "X"]


def test_training_step_has_a_device_kernel_per_launching_operator(
    step_trace: tuple[Any, list[dict[str, Any]]],
) -> None:
    _, events = step_trace
    kernels = by_category(events, "kernel")
    operators = {event["args"]["External id"]: event for event in by_category(events, "cpu_op")}
    assert len(kernels) >= 10, "forward, backward and optimizer kernels are missing"
    for kernel in kernels:
        assert kernel["pid"] == 0, "kernels of device 0 belong on device 0's lane"
        assert kernel["args"]["device"] == 0
        assert kernel["dur"] >= 0
        operator = operators[kernel["args"]["External id"]]
        # The kernel is named after, and runs after the start of, the operator that launched it.
        assert kernel["name"] == operator["name"]
        assert kernel["ts"] >= operator["ts"]
    names = {kernel["name"] for kernel in kernels}
    assert {"aten::addmm", "aten::mm", "aten::relu"} & names
    assert (
        any(name.startswith("aten::") and "backward" in name for name in names)
        or "aten::mm" in names
    )


def test_kernels_sit_on_the_lane_of_their_stream(
    step_trace: tuple[Any, list[dict[str, Any]]],
) -> None:
    _, events = step_trace
    kernels = by_category(events, "kernel")
    assert {kernel["args"]["stream"] for kernel in kernels} == {0}, (
        "the step used the default stream"
    )
    assert len({kernel["tid"] for kernel in kernels}) == 1
    lanes = [
        event
        for event in events
        if event.get("ph") == "M" and event.get("name") == "thread_name" and event["pid"] == 0
    ]
    assert any("stream 0" in lane["args"]["name"] for lane in lanes)


def test_flow_arrows_join_each_launch_to_its_device_work(
    step_trace: tuple[Any, list[dict[str, Any]]],
) -> None:
    _, events = step_trace
    launches = {
        event["args"]["correlation"]: event for event in by_category(events, "privateuse1_runtime")
    }
    device_work = by_category(events, "kernel") + by_category(events, "gpu_memcpy")
    starts = {
        event["id"] for event in events if event.get("ph") == "s" and event.get("cat") == "ac2g"
    }
    ends = {
        event["id"] for event in events if event.get("ph") == "f" and event.get("cat") == "ac2g"
    }
    assert device_work
    for work in device_work:
        launch = launches[work["args"]["correlation"]]
        assert launch["args"]["External id"] == work["args"]["External id"]
        assert work["ts"] + 1 >= launch["ts"], "work cannot start before its launch (1 us rounding)"
        assert work["args"]["correlation"] in starts and work["args"]["correlation"] in ends


def test_copies_are_memcpy_events(step_trace: tuple[Any, list[dict[str, Any]]]) -> None:
    _, events = step_trace
    copies = {event["name"] for event in by_category(events, "gpu_memcpy")}
    # The batch goes to the device, the loss comes back with item().
    assert {"Memcpy HtoD", "Memcpy DtoH"} <= copies


def test_key_averages_report_device_time_per_operator(
    step_trace: tuple[Any, list[dict[str, Any]]],
) -> None:
    prof, _ = step_trace
    averages = {average.key: average for average in prof.key_averages()}
    launched = [
        averages[name] for name in ("aten::addmm", "aten::mm", "aten::relu") if name in averages
    ]
    assert launched
    for average in launched:
        assert average.device_time_total > 0
        assert average.self_device_time_total > 0
    table = prof.key_averages().table(sort_by="device_time_total", row_limit=5)
    assert "Self OPENREG" in table and "OPENREG total" in table


def test_work_on_a_side_stream_is_on_its_own_lane(tmp_path: Path) -> None:
    side = torch.openreg.Stream()
    x = torch.randn(64, 64, device="openreg")
    torch.openreg.synchronize()
    with profile(activities=ACTIVITIES) as prof:
        y = x @ x
        side.wait_stream(torch.openreg.current_stream())
        with torch.openreg.stream(side):
            z = x @ x
        torch.openreg.current_stream().wait_stream(side)
        (y + z).sum().item()
    kernels = [
        k for k in by_category(exported_trace(prof, tmp_path), "kernel") if k["name"] == "aten::mm"
    ]
    assert sorted(k["args"]["stream"] for k in kernels) == sorted([0, side.stream_id])
    assert len({k["tid"] for k in kernels}) == 2


def test_cpu_only_profile_records_no_device_events(tmp_path: Path) -> None:
    x = torch.randn(8, 8, device="openreg")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        (x @ x).sum().item()
    events = exported_trace(prof, tmp_path)
    assert by_category(events, "cpu_op")
    assert not by_category(events, "kernel") and not by_category(events, "gpu_memcpy")


def test_work_between_profiles_is_not_recorded(tmp_path: Path) -> None:
    x = torch.randn(8, 8, device="openreg")
    with profile(activities=ACTIVITIES):
        x.add(1)
    torch.openreg.synchronize()
    x.mul(2)  # between the two profiles
    torch.openreg.synchronize()
    with profile(activities=ACTIVITIES) as second:
        x.sub(3)
    names = {k["name"] for k in by_category(exported_trace(second, tmp_path), "kernel")}
    assert names == {"aten::sub"}


def test_profile_memory_shows_device_allocations_and_frees() -> None:
    torch.openreg.synchronize()
    with profile(activities=ACTIVITIES, profile_memory=True) as prof:
        x = torch.empty(1024, 1024, device="openreg")  # 4 MiB
        del x
    averages = {average.key: average for average in prof.key_averages()}
    # The allocation is charged to the operator that made it; the free, made
    # by no operator, is a [memory] event of its own.
    assert averages["aten::empty"].device_memory_usage == 4 * 1024 * 1024
    assert averages["aten::empty"].cpu_memory_usage == 0
    memory = [event for event in prof.events() if event.name == "[memory]"]
    assert -4 * 1024 * 1024 in [event.device_memory_usage for event in memory]


LEGACY_PROBE = """
import torch, torch_openreg
from torch import nn
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8)).to("openreg")
x = torch.randn(32, 64, device="openreg")
model(x).sum().backward()
torch.openreg.synchronize()
with torch.autograd.profiler.profile(use_device="openreg", use_kineto={kineto}) as prof:
    for _ in range(20):
        model(x).sum().backward()
    torch.openreg.synchronize()
events = prof.function_events
assert events, "no events"
assert all(e.time_range.end >= e.time_range.start >= 0 for e in events), "negative times"
host = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU]
linear = [e for e in host if e.name == "aten::addmm"]
assert linear and all(e.cpu_time_total > 0 for e in linear)
assert sum(e.device_time_total for e in linear) > 0, "no device time"
assert all(e.device_time_total >= 0 for e in events), "negative device time"
print("OK")
"""


@pytest.mark.child_interpreters
@pytest.mark.parametrize("kineto", [False, True])
def test_legacy_use_device_path_gives_positive_times_and_no_assertions(
    run_python: Callable[..., Any], kineto: bool
) -> None:
    result = run_python(LEGACY_PROBE.replace("{kineto}", str(kineto)))
    assert result.returncode == 0, result.stderr
    assert "INTERNAL ASSERT" not in result.stderr
    assert "not enabled" not in result.stderr
    assert "OK" in result.stdout


COLLECTIVE_PROBE = """
import torch, torch_openreg
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile
dist.init_process_group(
    device_id=torch.device("openreg", 0), store=dist.HashStore(), rank=0, world_size=1
)
tensor = torch.ones(1024, device="openreg")
dist.all_reduce(tensor)
torch.openreg.synchronize()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
    dist.all_reduce(tensor)
    torch.openreg.synchronize()
prof.export_chrome_trace({path!r})
dist.destroy_process_group()
"""


@pytest.mark.child_interpreters
def test_collectives_are_device_events(run_python: Callable[..., Any], tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    result = run_python(COLLECTIVE_PROBE.replace("{path!r}", repr(str(path))))
    assert result.returncode == 0, result.stderr
    events = json.loads(path.read_text())["traceEvents"]
    operators = {event["args"]["External id"]: event for event in by_category(events, "cpu_op")}
    kernels = by_category(events, "kernel")
    issued = [kernel for kernel in kernels if "allreduce" in kernel["name"]]
    assert issued, [kernel["name"] for kernel in kernels]
    for kernel in issued:
        assert kernel["pid"] == 0 and kernel["args"]["stream"] == 0
        assert operators[kernel["args"]["External id"]]["name"] == kernel["name"]
