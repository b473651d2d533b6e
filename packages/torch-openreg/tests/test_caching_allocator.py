"""The caching device allocator (csrc/block_pool.cpp) and the pinned host allocator.

Every test runs in a fresh interpreter (``run_python``), so the allocator starts
empty and statistics can be asserted exactly, not as deltas. The child prints one
``RESULT {json}`` line; the assertions are made here, in the parent.

The rules under test (CUDA's caching allocator, as documented in block_pool.h):

* requests round up to 512 bytes; a block's rounded size is what ``allocated_bytes``
  counts, the unrounded request is ``requested_bytes``;
* blocks up to 1 MiB ("small pool") are cut from 2 MiB segments; larger blocks below
  10 MiB from 20 MiB segments; from 10 MiB on, a block gets its own segment rounded
  up to 2 MiB ("large pool");
* a free block larger than needed is split (small pool: if at least 512 bytes are
  left; large pool: if more than 1 MiB is left), and freed neighbours merge again;
* free blocks are kept per stream: a block freed by the host is only reused by
  allocations on the stream it was allocated for;
* ``empty_cache()`` returns every segment without live blocks to the runtime;
  out of memory releases the cache and retries once, then raises
  ``torch.OutOfMemoryError``.
"""

from __future__ import annotations

import json
import re
import textwrap
from typing import Any

import pytest

# Every test runs its device work in fresh interpreters it starts (see the
# child_interpreters marker in pyproject.toml).
pytestmark = pytest.mark.child_interpreters

KiB = 1 << 10
MiB = 1 << 20
SMALL_SEGMENT = 2 * MiB
SHARED_LARGE_SEGMENT = 20 * MiB

# Prepended to every child program.
PRELUDE = """\
import json
import torch
import torch_openreg

MiB = 1 << 20


def u8(nbytes, device="openreg"):
    return torch.empty(nbytes, dtype=torch.uint8, device=device)


def stats(device=0):
    return torch.openreg.memory_stats(device)


def emit(**values):
    print("RESULT " + json.dumps(values), flush=True)

"""


def block(nbytes: int) -> int:
    """Bytes the allocator accounts for a request of ``nbytes`` (512-byte rounding)."""
    return max(512, -(-nbytes // 512) * 512)


def run_child(run_python: Any, body: str, **env: str) -> dict[str, Any]:
    """Run PRELUDE + ``body`` in a fresh interpreter and return its RESULT object."""
    result = run_python(PRELUDE + textwrap.dedent(body), **env)
    assert result.returncode == 0, f"child failed:\n{result.stdout}\n{result.stderr}"
    found = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(found) == 1, f"expected one RESULT line:\n{result.stdout}\n{result.stderr}"
    return json.loads(found[0].removeprefix("RESULT "))


# --- reuse, splitting, merging ---------------------------------------------------------


def test_freed_block_is_reused_without_calling_the_runtime(run_python):
    out = run_child(
        run_python,
        """
        a = u8(1000)
        first = a.data_ptr()
        after_first = stats()["num_device_alloc"]
        del a
        b = u8(1000)
        same_size = b.data_ptr()
        del b
        c = torch.empty(250, dtype=torch.float32, device="openreg")  # same 1000 bytes
        other_dtype = c.data_ptr()
        s = stats()
        emit(first=first, same_size=same_size, other_dtype=other_dtype,
             after_first=after_first, device_allocs=s["num_device_alloc"],
             allocations=s["allocation.all.allocated"], freed=s["allocated_bytes.all.freed"],
             segments=s["segment.all.current"])
        """,
    )
    assert out["same_size"] == out["first"]
    assert out["other_dtype"] == out["first"]
    assert out["after_first"] == 1
    assert out["device_allocs"] == 1  # unchanged: both reuses came from the cache
    assert out["segments"] == 1
    assert out["allocations"] == 3
    assert out["freed"] == 2 * block(1000)


def test_small_blocks_are_carved_from_one_2mib_segment(run_python):
    out = run_child(
        run_python,
        """
        keys = ("segment.small_pool.current", "segment.large_pool.current",
                "reserved_bytes.all.current", "allocated_bytes.all.current",
                "requested_bytes.all.current", "inactive_split.small_pool.current",
                "inactive_split_bytes.small_pool.current", "num_device_alloc")
        a = u8(1000)
        one = {k: stats()[k] for k in keys}
        b = u8(3000)
        two = {k: stats()[k] for k in keys}
        emit(one=one, two=two, offset=b.data_ptr() - a.data_ptr())
        """,
    )
    assert out["one"] == {
        "segment.small_pool.current": 1,
        "segment.large_pool.current": 0,
        "reserved_bytes.all.current": SMALL_SEGMENT,
        "allocated_bytes.all.current": 1024,
        "requested_bytes.all.current": 1000,
        "inactive_split.small_pool.current": 1,  # the rest of the segment
        "inactive_split_bytes.small_pool.current": SMALL_SEGMENT - 1024,
        "num_device_alloc": 1,
    }
    # The second tensor is cut from the same segment, right after the first.
    assert out["offset"] == 1024
    assert out["two"] == {
        "segment.small_pool.current": 1,
        "segment.large_pool.current": 0,
        "reserved_bytes.all.current": SMALL_SEGMENT,
        "allocated_bytes.all.current": 1024 + 3072,
        "requested_bytes.all.current": 4000,
        "inactive_split.small_pool.current": 1,
        "inactive_split_bytes.small_pool.current": SMALL_SEGMENT - 4096,
        "num_device_alloc": 1,
    }


def test_freed_neighbours_merge_and_best_fit_fills_holes(run_python):
    out = run_child(
        run_python,
        """
        def split():
            s = stats()
            return [s["inactive_split.small_pool.current"],
                    s["inactive_split_bytes.small_pool.current"]]

        a, b, c = u8(1024), u8(1024), u8(1024)
        pa, pb, pc = a.data_ptr(), b.data_ptr(), c.data_ptr()
        del b
        hole = split()                   # b's hole and the segment's tail
        refill = u8(1000)                # best fit: b's hole, not the tail
        refilled_at = refill.data_ptr()
        del refill
        del a
        merged_front = split()           # a + b merged: still two free blocks
        del c
        whole = split()                  # everything merged into one unsplit segment
        s = stats()
        big = u8(MiB)                    # the merged segment serves a 1 MiB block
        emit(pa=pa, pb=pb, pc=pc, hole=hole, refilled_at=refilled_at,
             merged_front=merged_front, whole=whole, big_at=big.data_ptr(),
             segments=s["segment.all.current"], reserved=s["reserved_bytes.all.current"],
             device_allocs=stats()["num_device_alloc"])
        """,
    )
    assert out["pb"] - out["pa"] == 1024 and out["pc"] - out["pb"] == 1024
    tail = SMALL_SEGMENT - 3 * 1024
    assert out["hole"] == [2, 1024 + tail]
    assert out["refilled_at"] == out["pb"]
    assert out["merged_front"] == [2, 2048 + tail]
    assert out["whole"] == [0, 0]  # an unsplit segment is not "inactive split"
    assert out["segments"] == 1
    assert out["reserved"] == SMALL_SEGMENT
    assert out["big_at"] == out["pa"]
    assert out["device_allocs"] == 1


# --- segment sizes of the size classes ---------------------------------------------------

SEGMENT_SIZES = {
    # request bytes: (pool, segment bytes, block bytes)
    1: ("small_pool", SMALL_SEGMENT, 512),
    512 * KiB: ("small_pool", SMALL_SEGMENT, 512 * KiB),
    MiB: ("small_pool", SMALL_SEGMENT, MiB),
    MiB + 1: ("large_pool", SHARED_LARGE_SEGMENT, MiB + 512),
    2 * MiB: ("large_pool", SHARED_LARGE_SEGMENT, 2 * MiB),
    10 * MiB - 512: ("large_pool", SHARED_LARGE_SEGMENT, 10 * MiB - 512),
    10 * MiB: ("large_pool", 10 * MiB, 10 * MiB),
    12 * MiB: ("large_pool", 12 * MiB, 12 * MiB),
    12 * MiB + 1: ("large_pool", 14 * MiB, 12 * MiB + 512),  # 2 MiB - 512 left: split
    13 * MiB: ("large_pool", 14 * MiB, 14 * MiB),  # 1 MiB left is not split off
}


def test_segment_size_of_each_size_class(run_python):
    out = run_child(
        run_python,
        f"""
        found = {{}}
        for nbytes in {sorted(SEGMENT_SIZES)!r}:
            torch.openreg.empty_cache()
            free_before = torch.openreg.mem_get_info(0)[0]
            t = u8(nbytes)
            s = stats()
            pool = "small_pool" if s["segment.small_pool.current"] else "large_pool"
            found[nbytes] = dict(
                pool=pool,
                segments=s["segment.all.current"],
                reserved=s["reserved_bytes.all.current"],
                pool_reserved=s[f"reserved_bytes.{{pool}}.current"],
                runtime=free_before - torch.openreg.mem_get_info(0)[0],
                allocated=s["allocated_bytes.all.current"],
            )
            del t
        emit(found=found)
        """,
    )
    found = {int(nbytes): value for nbytes, value in out["found"].items()}
    expected = {
        nbytes: {
            "pool": pool,
            "segments": 1,
            "reserved": segment,
            "pool_reserved": segment,
            "runtime": segment,  # the runtime sees exactly one segment of that size
            "allocated": allocated,
        }
        for nbytes, (pool, segment, allocated) in SEGMENT_SIZES.items()
    }
    assert found == expected


def test_large_blocks_share_20mib_segments_and_split_only_above_1mib(run_python):
    out = run_child(
        run_python,
        """
        a = u8(2 * MiB)
        b = u8(2 * MiB)                  # same 20 MiB segment, right after a
        offset = b.data_ptr() - a.data_ptr()
        s = stats()
        shared = [s["segment.large_pool.current"], s["inactive_split_bytes.large_pool.current"]]
        c = u8(12 * MiB)                 # from the 16 MiB rest of the shared segment
        s = stats()
        from_rest = [s["segment.large_pool.current"], s["reserved_bytes.all.current"]]
        del a, b, c
        start = stats()["num_device_alloc"]
        d = u8(19 * MiB)                 # the whole cached segment: 1 MiB left is not split
        s = stats()
        emit(offset=offset, shared=shared, from_rest=from_rest,
             no_split=[s["allocated_bytes.large_pool.current"],
                       s["requested_bytes.large_pool.current"],
                       s["inactive_split.large_pool.current"],
                       s["num_device_alloc"] - start])
        """,
    )
    assert out["offset"] == 2 * MiB
    assert out["shared"] == [1, SHARED_LARGE_SEGMENT - 4 * MiB]
    assert out["from_rest"] == [1, SHARED_LARGE_SEGMENT]
    assert out["no_split"] == [SHARED_LARGE_SEGMENT, 19 * MiB, 0, 0]


# --- streams ------------------------------------------------------------------------------


def test_free_blocks_are_reused_only_on_their_stream(run_python):
    out = run_child(
        run_python,
        """
        side = torch.openreg.Stream()
        a = u8(1000)
        on_default = a.data_ptr()
        del a
        with torch.openreg.stream(side):
            b = u8(1000)                 # must not get the block freed on the default stream
        on_side = b.data_ptr()
        side_segments = stats()["segment.all.current"]
        c = u8(1000)                     # the default stream gets its block back
        again_default = c.data_ptr()
        del b
        with torch.openreg.stream(side):
            d = u8(1000)                 # and the side stream gets its own back
        again_side = d.data_ptr()
        emit(on_default=on_default, on_side=on_side, side_segments=side_segments,
             again_default=again_default, again_side=again_side,
             device_allocs=stats()["num_device_alloc"])
        """,
    )
    assert out["on_side"] != out["on_default"]
    assert out["side_segments"] == 2  # a segment of its own for the side stream
    assert out["again_default"] == out["on_default"]
    assert out["again_side"] == out["on_side"]
    assert out["device_allocs"] == 2


def test_record_stream_defers_reuse_until_that_streams_work_is_done(run_python):
    out = run_child(
        run_python,
        """
        side = torch.openreg.Stream()
        a = u8(1000)
        first = a.data_ptr()
        # The side stream is busy until released (tests/_async.py's held_stream).
        hold = torch_openreg._C._StreamHold(side.stream_id, side.device_index, 60.0)
        a.record_stream(side)
        del a
        # As CUDA counts it: no longer allocated, still active (held for the side stream).
        pending = [stats()[f"{key}.all.current"] for key in ("allocated_bytes", "active_bytes")]
        b = u8(1000)
        while_busy = b.data_ptr()
        hold.release()
        side.synchronize()
        c = u8(1000)  # finished frees are collected at the next allocation
        after = [stats()[f"{key}.all.current"] for key in ("allocated_bytes", "active_bytes")]
        emit(first=first, pending=pending, while_busy=while_busy, after=after,
             reused=c.data_ptr())
        """,
    )
    assert out["pending"] == [0, 1024]
    assert out["while_busy"] != out["first"]
    assert out["after"] == [2048, 2048]  # b and c
    assert out["reused"] == out["first"]


# --- empty_cache and out of memory ---------------------------------------------------------


def test_empty_cache_returns_reserved_memory_to_the_runtime(run_python):
    out = run_child(
        run_python,
        """
        free0, total = torch.openreg.mem_get_info(0)
        keep = u8(100)                            # a live block: its segment stays
        tmp = [u8(1000), u8(12 * MiB), u8(2 * MiB)]
        del tmp
        cached = [torch.openreg.memory_reserved(), free0 - torch.openreg.mem_get_info(0)[0]]
        torch.openreg.empty_cache()
        s = stats()
        kept = [torch.openreg.memory_reserved(), free0 - torch.openreg.mem_get_info(0)[0],
                s["segment.all.current"], s["num_device_free"], s["allocated_bytes.all.current"]]
        del keep
        torch.openreg.empty_cache()
        s = stats()
        emptied = [torch.openreg.memory_reserved(), free0 - torch.openreg.mem_get_info(0)[0],
                   s["segment.all.current"], s["num_device_free"]]
        emit(cached=cached, kept=kept, emptied=emptied)
        """,
    )
    reserved = SMALL_SEGMENT + 12 * MiB + SHARED_LARGE_SEGMENT
    assert out["cached"] == [reserved, reserved]
    assert out["kept"] == [SMALL_SEGMENT, SMALL_SEGMENT, 1, 2, 512]
    assert out["emptied"] == [0, 0, 0, 3]


def test_out_of_memory_releases_the_cache_and_retries_once(run_python):
    out = run_child(
        run_python,
        """
        cached = [u8(12 * MiB) for _ in range(4)]   # 48 MiB of the 64 MiB device
        del cached
        s = stats()
        before = [s["reserved_bytes.all.current"], torch.openreg.mem_get_info(0)[0]]
        big = u8(30 * MiB)                         # fits only once the cache is released
        big.fill_(7)
        s = stats()
        emit(before=before, value=big[-1].item(), retries=s["num_alloc_retries"],
             ooms=s["num_ooms"], reserved=s["reserved_bytes.all.current"],
             device_frees=s["num_device_free"], device_allocs=s["num_device_alloc"])
        """,
        OPENREG_DEVICE_MEMORY="64MiB",
    )
    assert out["before"] == [48 * MiB, 16 * MiB]
    assert out["value"] == 7
    assert out["retries"] == 1
    assert out["ooms"] == 0
    assert out["reserved"] == 30 * MiB
    assert out["device_frees"] == 4
    assert out["device_allocs"] == 5


def test_impossible_allocation_raises_out_of_memory_and_device_keeps_working(run_python):
    out = run_child(
        run_python,
        """
        keep = u8(2 * MiB)           # 2 MiB in use, in a 20 MiB segment
        spare = u8(100)
        del spare                    # a cached 2 MiB small segment, released by the retry
        try:
            u8(100 * MiB)
        except torch.OutOfMemoryError as error:
            message, is_runtime_error = str(error), isinstance(error, RuntimeError)
        else:
            message, is_runtime_error = None, None
        s = stats()
        counters = [s["num_ooms"], s["num_alloc_retries"], s["reserved_bytes.all.current"],
                    s["allocated_bytes.all.current"]]
        x = torch.ones(1000, device="openreg")
        total = (x * 2).sum().item()
        y = u8(40 * MiB)             # what is left (44 MiB) is still usable
        y.fill_(1)
        emit(message=message, is_runtime_error=is_runtime_error, counters=counters,
             total=total, last=y[-1].item(), ooms_after=stats()["num_ooms"])
        """,
        OPENREG_DEVICE_MEMORY="64MiB",
    )
    message = out["message"]
    assert message is not None, "allocating 100 MiB on a 64 MiB device did not raise"
    assert out["is_runtime_error"] is True
    assert "device 0" in message
    assert str(100 * MiB) in message  # the requested size in bytes
    assert re.search(r"2\.00 MiB in use", message), message
    assert re.search(r"20\.00 MiB reserved", message), message
    assert re.search(r"64\.00 MiB capacity", message), message
    assert "OPENREG_DEVICE_MEMORY" in message
    # One OOM; the retry released the cached small segment but not the live one.
    assert out["counters"] == [1, 1, SHARED_LARGE_SEGMENT, 2 * MiB]
    assert out["total"] == 2000.0
    assert out["last"] == 1
    assert out["ooms_after"] == 1


# --- statistics ------------------------------------------------------------------------------

SIZES = (1, 512, 513, 4000, MiB, MiB + 1, 3 * MiB)  # five small blocks, two large ones
METRICS = (
    "allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
    "active_bytes", "inactive_split_bytes", "requested_bytes",
)  # fmt: skip


def pooled(spec: dict[str, dict[str, tuple[int, int]]]) -> dict[str, int]:
    """memory_stats entries from (small_pool, large_pool) values; "all" is their sum."""
    values: dict[str, int] = {}
    for metric, kinds in spec.items():
        for kind, (small, large) in kinds.items():
            values[f"{metric}.small_pool.{kind}"] = small
            values[f"{metric}.large_pool.{kind}"] = large
            values[f"{metric}.all.{kind}"] = small + large
    return values


def test_stats_are_exact_for_known_sizes(run_python):
    out = run_child(
        run_python,
        f"""
        def snapshot(device=0):
            s = stats(device)
            keys = [f"{{m}}.{{p}}.{{k}}" for m in {METRICS!r}
                    for p in ("all", "small_pool", "large_pool")
                    for k in ("current", "peak", "allocated", "freed")]
            keys += ["num_device_alloc", "num_device_free", "num_alloc_retries", "num_ooms"]
            return {{key: s[key] for key in keys}}

        tensors = [u8(n) for n in {SIZES!r}]
        allocated = snapshot()
        del tensors[5], tensors[3]                  # MiB + 1 and 4000 bytes: two holes
        freed = snapshot()
        torch.openreg.reset_peak_memory_stats()
        peak_reset = snapshot()
        hole = u8(4000)                             # best fit: the 4096-byte hole
        refilled = snapshot()
        torch.openreg.reset_accumulated_memory_stats()
        accumulated_reset = snapshot()
        other = u8(1000, device="openreg:1")        # pools are per device
        emit(allocated=allocated, freed=freed, peak_reset=peak_reset, refilled=refilled,
             accumulated_reset=accumulated_reset, device0_after_other=snapshot(),
             device1=snapshot(1))
        """,
    )
    blocks = [block(n) for n in SIZES]
    assert blocks == [512, 512, 1024, 4096, MiB, MiB + 512, 3 * MiB]
    small, large = sum(blocks[:5]), sum(blocks[5:])
    small_requested, large_requested = sum(SIZES[:5]), sum(SIZES[5:])
    # Each allocation takes the segment's free tail and splits off a new, shorter tail:
    # inactive_split counts every tail made (allocated) and taken again (freed).
    small_tails = [SMALL_SEGMENT - sum(blocks[: i + 1]) for i in range(5)]
    large_tails = [SHARED_LARGE_SEGMENT - sum(blocks[5 : 5 + i + 1]) for i in range(2)]
    grown = {  # metrics that only grew while allocating: current = peak = allocated
        "allocation": (5, 2),
        "active": (5, 2),
        "segment": (1, 1),
        "allocated_bytes": (small, large),
        "active_bytes": (small, large),
        "reserved_bytes": (SMALL_SEGMENT, SHARED_LARGE_SEGMENT),
        "requested_bytes": (small_requested, large_requested),
    }
    counters = {"num_device_alloc": 2, "num_device_free": 0, "num_alloc_retries": 0, "num_ooms": 0}
    spec = {
        metric: {"current": v, "peak": v, "allocated": v, "freed": (0, 0)}
        for metric, v in grown.items()
    }
    spec["inactive_split"] = {
        "current": (1, 1), "peak": (1, 1), "allocated": (5, 2), "freed": (4, 1),
    }  # fmt: skip
    spec["inactive_split_bytes"] = {
        "current": (small_tails[-1], large_tails[-1]),
        "peak": (small_tails[0], large_tails[0]),
        "allocated": (sum(small_tails), sum(large_tails)),
        "freed": (sum(small_tails[:-1]), large_tails[0]),
    }
    expected = pooled(spec) | counters
    # "all" is its own statistic: its peak is that of the sum over time (small pool's
    # last tail plus the large pool's first tail), not the sum of the pools' peaks.
    expected["inactive_split_bytes.all.peak"] = small_tails[-1] + large_tails[0]
    assert out["allocated"] == expected

    # Freeing the 4000-byte and the (MiB + 1)-byte tensors leaves a hole in each segment
    # (their neighbours are live): nothing merges, nothing goes back to the runtime.
    gone = {
        "allocation": (1, 1),
        "active": (1, 1),
        "allocated_bytes": (4096, MiB + 512),
        "active_bytes": (4096, MiB + 512),
        "requested_bytes": (4000, MiB + 1),
    }
    for metric, (small_gone, large_gone) in gone.items():
        small_now, large_now = spec[metric]["current"]
        spec[metric] |= {"current": (small_now - small_gone, large_now - large_gone)}
        spec[metric] |= {"freed": (small_gone, large_gone)}
    spec["inactive_split"] = {
        "current": (2, 2), "peak": (2, 2), "allocated": (6, 3), "freed": (4, 1),
    }  # fmt: skip
    tails_bytes = spec["inactive_split_bytes"]
    spec["inactive_split_bytes"] = {
        **tails_bytes,
        "current": (small_tails[-1] + 4096, large_tails[-1] + MiB + 512),
        "allocated": (sum(small_tails) + 4096, sum(large_tails) + MiB + 512),
    }
    expected = pooled(spec) | counters
    expected["inactive_split_bytes.all.peak"] = small_tails[-1] + large_tails[0]
    assert out["freed"] == expected

    # reset_peak_memory_stats: every peak (per pool and "all") becomes the current value.
    for kinds in spec.values():
        kinds["peak"] = kinds["current"]
    expected = pooled(spec) | counters
    assert out["peak_reset"] == expected

    # The refill takes the 4096-byte hole (not the tail): the small pool is back to its
    # first state, and the peaks follow the current values up.
    refilled = out["refilled"]
    assert refilled["allocated_bytes.small_pool.current"] == small
    assert refilled["allocated_bytes.all.peak"] == small + 3 * MiB
    assert refilled["allocation.all.peak"] == 6
    assert refilled["inactive_split.small_pool.current"] == 1
    assert refilled["inactive_split_bytes.small_pool.current"] == small_tails[-1]
    assert refilled["inactive_split.small_pool.freed"] == 5
    assert refilled["allocation.all.allocated"] == 8
    assert refilled["allocated_bytes.all.allocated"] == small + large + 4096
    assert refilled["reserved_bytes.all.current"] == SMALL_SEGMENT + SHARED_LARGE_SEGMENT
    assert refilled["num_device_alloc"] == 2

    # reset_accumulated_memory_stats: totals and runtime counters restart; current and
    # peak values are kept.
    reset = out["accumulated_reset"]
    for key, value in reset.items():
        if key.endswith((".allocated", ".freed")) or key.startswith("num_"):
            assert value == 0, key
        else:
            assert value == refilled[key], key

    # Allocating on device 1 changes nothing on device 0; device 1 counts its own.
    assert out["device0_after_other"] == reset
    device1 = out["device1"]
    assert device1["allocated_bytes.all.current"] == 1024
    assert device1["requested_bytes.all.current"] == 1000
    assert device1["reserved_bytes.all.current"] == SMALL_SEGMENT
    assert device1["num_device_alloc"] == 1


def test_accelerator_memory_functions_agree_with_torch_openreg(run_python):
    out = run_child(
        run_python,
        """
        acc, orm = torch.accelerator, torch.openreg
        live = [u8(3000), u8(5 * MiB), u8(700, device="openreg:1")]
        del live[1]

        def compare():
            rows = []
            for d in (0, 1):
                rows.append([
                    acc.memory_allocated(d) == orm.memory_allocated(d),
                    acc.max_memory_allocated(d) == orm.max_memory_allocated(d),
                    acc.memory_reserved(d) == orm.memory_reserved(d),
                    acc.max_memory_reserved(d) == orm.max_memory_reserved(d),
                    acc.memory_stats(d) == orm.memory_stats(d),
                    tuple(acc.get_memory_info(d)) == tuple(orm.mem_get_info(d)),
                ])
            return rows

        agree = compare()
        figures = [orm.memory_allocated(0), orm.max_memory_allocated(0),
                   orm.memory_reserved(0), orm.memory_allocated(1)]
        acc.reset_peak_memory_stats(0)
        peak_after_reset = orm.max_memory_allocated(0)
        acc.reset_accumulated_memory_stats(0)
        totals_after_reset = orm.memory_stats(0)["allocated_bytes.all.allocated"]
        orm.reset_peak_memory_stats(1)
        acc_peak1 = acc.max_memory_allocated(1)
        acc.empty_cache()
        reserved_after_empty = [orm.memory_reserved(0), orm.memory_reserved(1)]
        emit(agree=agree, agree_after=compare(), figures=figures,
             peak_after_reset=peak_after_reset, totals_after_reset=totals_after_reset,
             acc_peak1=acc_peak1, reserved_after_empty=reserved_after_empty)
        """,
    )
    assert out["agree"] == [[True] * 6, [True] * 6]
    assert out["agree_after"] == [[True] * 6, [True] * 6]
    assert out["figures"] == [3072, 3072 + 5 * MiB, SMALL_SEGMENT + SHARED_LARGE_SEGMENT, 1024]
    assert out["peak_after_reset"] == 3072
    assert out["totals_after_reset"] == 0
    assert out["acc_peak1"] == 1024
    # empty_cache through torch.accelerator releases the unused 20 MiB segment only.
    assert out["reserved_after_empty"] == [SMALL_SEGMENT, SMALL_SEGMENT]


def test_memory_summary_reports_current_figures(run_python):
    out = run_child(
        run_python,
        """
        a = u8(3 * MiB // 2)
        b = u8(3 * MiB // 2)     # 3 MiB of large blocks in one 20 MiB segment
        c = u8(100)              # 512 bytes in a 2 MiB segment
        full = torch.openreg.memory_summary()
        short = torch.openreg.memory_summary(abbreviated=True)
        del b
        after = torch.openreg.memory_summary(device="openreg:0")
        other = torch.openreg.memory_summary(1)
        try:
            torch.openreg.memory_summary(5)
        except RuntimeError as error:
            invalid = str(error)
        else:
            invalid = None
        emit(full=full, short=short, after=after, other=other, invalid=invalid,
             same_as_default=after == torch.openreg.memory_summary())
        """,
    )

    def cells(summary: str, label: str, pool: str | None = None) -> list[str]:
        """The four figures of row ``label`` (or of its per-pool row ``pool``)."""
        lines = summary.splitlines()
        found = [i for i, line in enumerate(lines) if re.match(rf"\| {re.escape(label)} +\|", line)]
        assert len(found) == 1, f"no single row {label!r} in:\n{summary}"
        row = lines[found[0]]
        if pool is not None:
            following = lines[found[0] + 1 : found[0] + 3]
            row = next(line for line in following if line.startswith(f"|   from {pool} "))
        return [cell.strip() for cell in row.strip("|").split("|")[1:]]

    full, short, after = out["full"], out["short"], out["after"]
    assert "device 0" in full
    # current, peak, total allocated, total freed
    assert cells(full, "Allocated memory") == ["3.00 MiB", "3.00 MiB", "3.00 MiB", "0 B"]
    assert cells(full, "Reserved memory (segments)") == ["22.00 MiB"] * 3 + ["0 B"]
    assert cells(full, "Allocations") == ["3", "3", "3", "0"]
    assert cells(full, "Segments") == ["2", "2", "2", "0"]
    assert cells(full, "Allocated memory", "blocks <= 1 MiB") == ["512 B"] * 3 + ["0 B"]
    assert cells(full, "Requested memory", "blocks <= 1 MiB") == ["100 B"] * 3 + ["0 B"]
    assert cells(full, "Reserved memory (segments)", "blocks > 1 MiB")[0] == "20.00 MiB"
    assert "Out-of-memory errors raised: 0" in full
    assert "Allocation retries" in full
    # abbreviated: the same totals, without the per-pool rows
    assert cells(short, "Allocated memory") == cells(full, "Allocated memory")
    assert "from blocks" not in short
    assert len(short.splitlines()) < len(full.splitlines())
    # after freeing 1.5 MiB
    assert cells(after, "Allocated memory") == ["1.50 MiB", "3.00 MiB", "3.00 MiB", "1.50 MiB"]
    assert cells(after, "Allocations") == ["2", "3", "3", "1"]
    assert cells(out["other"], "Allocated memory") == ["0 B"] * 4
    assert "device 1" in out["other"]
    assert out["same_as_default"] is True
    assert out["invalid"] is not None and "valid indices" in out["invalid"]


# --- pinned host memory -----------------------------------------------------------------


def test_pinned_host_blocks_are_cached_and_released_by_empty_host_cache(run_python):
    out = run_child(
        run_python,
        """
        import openreg_runtime as ort

        def kind(pointer):
            return ort.pointer_attributes(pointer).type.name

        # torch.accelerator.empty_host_cache() does nothing until torch has seen the
        # device initialised (by a device tensor factory): see the report of issue 6.
        torch.ones(1, device="openreg")
        a = torch.empty(4000, dtype=torch.uint8, pin_memory=True)
        first = a.data_ptr()
        del a
        cached_kind = kind(first)            # still pinned: cached, not freed
        b = torch.arange(1000, dtype=torch.float32).pin_memory()   # 4000 bytes again
        reused = b.data_ptr() == first
        c = torch.empty(3000, dtype=torch.uint8, pin_memory=True)  # same 4 KiB class, b live
        second = c.data_ptr()
        del c
        d = torch.empty(3500, dtype=torch.uint8, pin_memory=True)
        same_class = d.data_ptr() == second
        e = torch.empty(5000, dtype=torch.uint8, pin_memory=True)  # the 8 KiB class
        other_class = e.data_ptr() not in (first, second)
        keep = torch.full((100,), 3.0).pin_memory()
        del d, e
        torch.accelerator.empty_host_cache()
        emit(cached_kind=cached_kind, reused=reused, distinct=second != first,
             same_class=same_class, other_class=other_class,
             b_alive=kind(first), released=kind(second),
             keep_alive=kind(keep.data_ptr()), keep_sum=keep.sum().item(),
             b_values=b[:3].tolist())
        """,
    )
    assert out["cached_kind"] == "HOST"
    assert out["reused"] is True
    assert out["distinct"] is True
    assert out["same_class"] is True
    assert out["other_class"] is True
    assert out["released"] == "UNREGISTERED"  # empty_host_cache freed the cached block
    assert out["b_alive"] == "HOST"  # a live pinned tensor keeps its block
    assert out["keep_alive"] == "HOST"
    assert out["keep_sum"] == 300.0
    assert out["b_values"] == [0.0, 1.0, 2.0]
