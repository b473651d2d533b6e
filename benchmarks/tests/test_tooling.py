"""The benchmark runner's own logic: pooling, machine-load readings, argument checks.

Timing itself is not tested here (that is what the benchmarks are for); these check
that the numbers the suite reports are computed from the measurements as documented.
"""

from __future__ import annotations

import statistics

import pytest

from benchmarks import common, cpu_tax, ops, run
from benchmarks.common import Pair


def _case_figure(openreg: list[float], peer: list[float], n: int = 1_000_000) -> common.Figure:
    pair = Pair(openreg=openreg, peer=peer, calls=10)
    return ops._figure("sum", n, pair, "1 ops (in-place fallback)", "inplace")


def test_pool_takes_the_median_over_every_process_repeats():
    first = [_case_figure([1.0, 1.2, 1.1], [1.0, 1.0, 1.0])]
    second = [_case_figure([3.0, 3.3, 2.7], [2.0, 2.0, 2.0])]
    (pooled,) = ops.pool([first, second])
    ratios = [1.0, 1.2, 1.1, 1.5, 1.65, 1.35]
    assert pooled.value == pytest.approx(statistics.median(ratios))
    assert pooled.openreg == pytest.approx(statistics.median([1.0, 1.2, 1.1, 3.0, 3.3, 2.7]))
    assert pooled.raw["processes"] == 2
    assert pooled.name == "sum n=1e6" and pooled.target == ops.LARGE_RATIO_TARGET


def test_pool_keeps_the_small_op_target_as_a_difference():
    small = [_case_figure([5e-6, 6e-6], [2e-6, 2e-6], n=100)]
    (pooled,) = ops.pool([small, small])
    assert pooled.kind == "abs_us_max"
    assert pooled.value == pytest.approx(3.5)  # median of 3, 3, 4, 4 µs


def test_pool_refuses_processes_that_measured_different_cases():
    with pytest.raises(ValueError):
        ops.pool([[_case_figure([1.0], [1.0])], []])


def _jiffies(busy: int, idle: int, steal: int = 0) -> dict[str, int]:
    values = dict.fromkeys(common.CPU_FIELDS, 0)
    values.update(user=busy, idle=idle, steal=steal)
    return values


def test_steal_share_is_the_stolen_part_of_the_elapsed_cpu_time():
    before, after = _jiffies(100, 100, steal=10), _jiffies(150, 130, steal=30)
    assert common.steal_share(before, after) == pytest.approx(20 / 100)
    assert common.steal_share(None, after) is None
    assert common.steal_share(before, before) is None


def test_busy_cores_counts_only_what_ran_during_the_window(monkeypatch):
    readings = iter([_jiffies(1_000_000, 5), _jiffies(1_000_050, 55)])  # half busy
    monkeypatch.setattr(common, "cpu_jiffies", lambda: next(readings))
    monkeypatch.setattr(common.os, "cpu_count", lambda: 2)
    assert common.busy_cores_now(window_seconds=0) == pytest.approx(1.0)


@pytest.mark.parametrize(("busy", "warned"), [(0.1, False), (0.6, True), (None, False)])
def test_the_runner_warns_only_when_other_processes_compete(capsys, busy, warned):
    run.warn_if_busy({"busy_cores_before_run": busy, "usable_cores": 2})
    assert ("warning: other processes kept" in capsys.readouterr().out) is warned


def test_processes_must_be_positive(capsys):
    with pytest.raises(SystemExit):
        run.parse_args(["--processes", "0"])
    assert "--processes must be at least 1" in capsys.readouterr().err


CALLGRIND_DUMP = """\
version: 1
creator: callgrind-3.19.0
cmd:  python -c ...
part: 1
desc: Timerange: Basic block 0 - 5093333
desc: Trigger: Client Request: MLP
events: Ir
summary: 0
totals: 96397071
"""


def test_a_region_dump_gives_its_name_and_instruction_total():
    assert cpu_tax.region_total(CALLGRIND_DUMP) == ("MLP", 96397071)


def test_the_dump_at_program_exit_is_not_a_region():
    at_exit = CALLGRIND_DUMP.replace("Client Request: MLP", "Program termination")
    assert cpu_tax.region_total(at_exit) is None
