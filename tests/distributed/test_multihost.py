"""Two simulated hosts (network namespaces joined by a veth pair), torchrun on each.

The rendezvous is a TCPStore on host 0's private address; Gloo connects the
hosts over the veth pair (GLOO_SOCKET_IFNAME). Exactly what a user runs on two
real machines, with their addresses.
"""

from __future__ import annotations

import time

import pytest

TIMEOUT = 10  # the process group's collective timeout in the failure test, seconds
# A rank must report the failure within the timeout; this bounds the extra time a
# loaded machine may need to notice and print it (the check is: no hang).
SLACK = 20


def test_ddp_across_two_hosts(hosts, launch):
    runs = [hosts.torchrun(launch, node, "--check") for node in (0, 1)]
    for rank, run in enumerate(runs):
        assert run.wait(300) == 0, run.output()
        assert f"rank {rank}: weights match single-process CPU training" in run.output()


@pytest.mark.parametrize("cut", ["set_link_down", "delete_link"])
def test_cutting_the_link_fails_every_rank_within_the_timeout(hosts, launch, cut):
    args = ("--steps", "1000000", "--report-every", "20", "--timeout", str(TIMEOUT))
    runs = [hosts.torchrun(launch, node, *args) for node in (0, 1)]
    for rank, run in enumerate(runs):
        run.wait_for_line(f"rank {rank}: step 60 ", timeout=240)  # training is under way
    cut_at = time.monotonic()
    getattr(hosts, cut)()
    for rank, run in enumerate(runs):
        code = run.wait(TIMEOUT + SLACK + 60)
        assert code not in (None, 0), f"rank {rank} did not fail ({code}):\n{run.output()}"
        failed_at, line = run.wait_for_line(f"rank {rank}: training failed", timeout=1)
        assert f"rank {rank} of 2" in line and "Timed out" in line, line
        assert failed_at - cut_at < TIMEOUT + SLACK, (failed_at - cut_at, line)
        print(f"rank {rank} failed {failed_at - cut_at:.1f} s after the cut: {line}")
