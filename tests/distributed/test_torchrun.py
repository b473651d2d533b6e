"""torchrun on this machine: DDP on openreg, two processes, checked against one CPU process."""

from __future__ import annotations

from _launch import EXAMPLE, TORCHRUN, child_environment


def test_ddp_with_torchrun_on_localhost(launch):
    run = launch([TORCHRUN, "--standalone", "--nproc-per-node", "2", EXAMPLE, "--check"],
                 child_environment())  # fmt: skip
    assert run.wait(300) == 0, run.output()
    for rank in (0, 1):
        assert f"rank {rank}: weights match single-process CPU training" in run.output()
