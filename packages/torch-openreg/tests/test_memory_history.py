"""Memory history and snapshots in torch.cuda's format, read by PyTorch's visualizer."""

from __future__ import annotations

import pickle
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.cuda import _memory_viz

# Tests here compare exact memory statistics (conftest.py).
pytestmark = pytest.mark.usefixtures("steady_memory_stats")

memory = torch.openreg.memory

MiB = 1024 * 1024


@pytest.fixture(autouse=True)
def _history_off() -> Iterator[None]:
    memory._record_memory_history(None)
    yield
    memory._record_memory_history(None)


def device_trace(snapshot: dict[str, Any], device: int = 0) -> list[dict[str, Any]]:
    return snapshot["device_traces"][device]


def frame_names(frames: list[dict[str, Any]]) -> set[str]:
    return {frame["name"] for frame in frames}


def allocate_for_the_record() -> torch.Tensor:
    return torch.empty(3 * MiB // 4, device="openreg")  # 3 MiB of float32


def test_history_records_allocations_and_frees_with_python_stacks() -> None:
    memory._record_memory_history(stacks="python")
    x = allocate_for_the_record()
    address = x.data_ptr()
    del x
    trace = device_trace(memory._snapshot())
    actions = [(entry["action"], entry.get("addr")) for entry in trace]
    alloc = actions.index(("alloc", address))
    assert actions.index(("free_requested", address)) > alloc
    assert actions.index(("free_completed", address)) > alloc
    alloc_entry = trace[alloc]
    assert alloc_entry["size"] >= 3 * MiB
    assert "allocate_for_the_record" in frame_names(alloc_entry["frames"])
    assert any(
        frame["filename"].endswith("test_memory_history.py") for frame in alloc_entry["frames"]
    )
    assert all(entry["time_us"] > 0 for entry in trace)


def test_new_segments_are_recorded() -> None:
    memory._record_memory_history()
    torch.openreg.empty_cache()
    x = torch.empty(30 * MiB // 4, device="openreg")  # larger than any cached segment
    trace = device_trace(memory._snapshot())
    segments = [entry for entry in trace if entry["action"] == "segment_alloc"]
    assert segments and segments[-1]["size"] >= 30 * MiB
    del x
    torch.openreg.empty_cache()
    trace = device_trace(memory._snapshot())
    assert any(entry["action"] == "segment_free" for entry in trace)


def test_snapshot_segments_show_live_blocks_with_their_stacks() -> None:
    memory._record_memory_history(enabled="state", stacks="python")
    x = allocate_for_the_record()
    snapshot = memory._snapshot()
    assert device_trace(snapshot) == [], "enabled='state' keeps no history"
    blocks = [block for segment in snapshot["segments"] for block in segment["blocks"]]
    (mine,) = [block for block in blocks if block["address"] == x.data_ptr()]
    assert mine["state"] == "active_allocated"
    assert mine["requested_size"] == x.nbytes
    assert "allocate_for_the_record" in frame_names(mine["frames"])
    for segment in snapshot["segments"]:
        assert segment["total_size"] == sum(block["size"] for block in segment["blocks"])
        assert segment["allocated_size"] == sum(
            block["size"] for block in segment["blocks"] if block["state"] == "active_allocated"
        )


def test_memory_snapshot_accounts_for_all_reserved_memory() -> None:
    x = torch.empty(MiB, device="openreg")
    segments = torch.openreg.memory_snapshot()
    reserved = sum(segment["total_size"] for segment in segments if segment["device"] == 0)
    assert reserved == torch.openreg.memory_reserved(0)
    allocated = sum(segment["allocated_size"] for segment in segments if segment["device"] == 0)
    assert allocated == torch.openreg.memory_allocated(0)
    del x


def test_max_entries_keeps_the_most_recent_actions() -> None:
    memory._record_memory_history(max_entries=4)
    tensors = [torch.empty(1024, device="openreg") for _ in range(6)]
    trace = device_trace(memory._snapshot())
    assert [entry["addr"] for entry in trace] == [t.data_ptr() for t in tensors[-4:]]
    times = [entry["time_us"] for entry in trace]
    assert times == sorted(times)


def test_disabling_stops_recording_and_clear_history_forgets() -> None:
    memory._record_memory_history()
    torch.empty(1024, device="openreg")
    assert device_trace(memory._snapshot())
    memory._record_memory_history(None)
    assert device_trace(memory._snapshot()) == []
    torch.empty(1024, device="openreg")
    assert device_trace(memory._snapshot()) == []


def test_context_none_records_no_stacks() -> None:
    memory._record_memory_history(context=None)
    x = allocate_for_the_record()
    trace = device_trace(memory._snapshot())
    assert [entry["frames"] for entry in trace if entry.get("addr") == x.data_ptr()] == [[]]


def test_cpp_stacks_are_recorded_with_stacks_all() -> None:
    memory._record_memory_history(stacks="all")
    x = allocate_for_the_record()
    trace = device_trace(memory._snapshot())
    (entry,) = [e for e in trace if e["action"] == "alloc" and e["addr"] == x.data_ptr()]
    names = frame_names(entry["frames"])
    assert "allocate_for_the_record" in names
    assert len(entry["frames"]) > 2 * len(
        [f for f in entry["frames"] if f["filename"].endswith(".py")]
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"enabled": "yes"}, "enabled must be one of"),
        ({"context": "everything"}, "context must be one of"),
        ({"stacks": "cpp"}, "stacks must be one of"),
        ({"max_entries": -1}, "max_entries must be"),
    ],
)
def test_bad_arguments_are_rejected(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        memory._record_memory_history(**arguments)


def test_memory_snapshot_rejects_pools() -> None:
    with pytest.raises(ValueError, match="mempool_id=None"):
        torch.openreg.memory_snapshot(mempool_id=(1, 2))


def test_the_memory_visualizer_reads_the_dumped_snapshot(tmp_path: Path) -> None:
    memory._record_memory_history(stacks="python")
    kept = allocate_for_the_record()
    gone = torch.empty(2 * MiB, device="openreg")
    del gone
    path = tmp_path / "snapshot.pickle"
    memory._dump_snapshot(str(path))
    snapshot = pickle.loads(path.read_bytes())

    summary = _memory_viz.segsum(snapshot)
    assert "segments" in summary and "Segment size mismatch" not in summary
    trace_text = _memory_viz.trace(snapshot)
    assert "del " in trace_text and "# free completed for " in trace_text
    allocations = re.findall(r"^\w+ = \w+\[\d+:", trace_text, flags=re.MULTILINE)
    assert len(allocations) >= 2
    assert "<html>" in _memory_viz.trace_plot(snapshot)
    assert "<html>" in _memory_viz.segment_plot(snapshot)
    flame = _memory_viz.memory(snapshot, format_flamegraph=lambda lines: lines)
    assert "allocate_for_the_record" in flame
    assert any(
        block["address"] == kept.data_ptr()
        for segment in snapshot["segments"]
        for block in segment["blocks"]
    )
