"""torch.distributed on openreg across processes: worlds of 2 and 4 fresh ranks.

Each test starts one world (``_distributed.run_world``) running a case of
``_distributed_cases.py``; the case does the checking and raises on any
mismatch, so the rank's exit status and output are the test's result.
Worlds of 4 ranks get 4 openreg devices per process (one per local rank, as
torchrun's LOCAL_RANK expects).
"""

from __future__ import annotations

import re

import pytest
from _distributed import run_world


def world_env(world_size: int) -> dict[str, str]:
    return {"OPENREG_DEVICE_COUNT": str(max(2, world_size))}


@pytest.mark.parametrize("world_size", [2, 4])
def test_every_collective_matches_gloo_on_cpu(world_size):
    run_world("collectives", world_size, env=world_env(world_size))


def test_process_group_init_forms():
    """init_process_group(), device_id=, "cpu:gloo,openreg:orgloo" and "orgloo"."""
    run_world("init_forms", 2)


def test_stream_order_issue_order_and_argument_checks():
    run_world("semantics", 2)


@pytest.mark.parametrize("world_size", [2, 4])
def test_ddp_matches_single_process_training(world_size):
    run_world("ddp", world_size, env=world_env(world_size))


def test_ddp_under_chaos_scheduling_never_waits_out_a_hold():
    run_world("ddp_under_chaos", 2)


def test_fsdp2_trains_a_transformer_like_one_process():
    run_world("fsdp", 2)


def test_dtensor_sharded_matmul_equals_cpu():
    run_world("dtensor", 2)


SECONDS = re.compile(r"FAILED after ([0-9.]+)s: (.*)")


def test_dead_peer_fails_every_survivor_with_its_rank():
    results = run_world("dead_peer", 3, env={"CASE_TIMEOUT": "20", **world_env(3)},
                        expect_success=False)  # fmt: skip
    *survivors, dead = results
    assert dead.returncode == 17, dead.describe()
    for result in survivors:
        assert result.returncode == 0 and "OK" in result.stdout, result.describe()
        elapsed, message = SECONDS.search(result.stdout).groups()
        assert f"rank {result.rank} of 3" in message, message
        # Within the group's timeout (generous bound: the check is that it does not hang).
        assert float(elapsed) < 20, result.stdout


def test_timeout_fails_with_the_rank_and_the_cause():
    (first, second) = run_world("timeout", 2)
    elapsed, message = SECONDS.search(first.stdout).groups()
    assert "rank 0 of 2" in message and "Timed out" in message, message
    assert 2.5 < float(elapsed) < 60, first.stdout  # the 3 s timeout, then the error
    assert second.returncode == 0
