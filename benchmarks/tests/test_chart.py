"""The benchmark chart (benchmarks/chart.py), rendered from a stored results file.

``data/results-small.json`` is the output of a real ``run.py --quick`` run (with the
raw per-repeat numbers dropped to keep it small), with one family of each kind.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import chart, run
from benchmarks.common import Figure

RESULTS = Path(__file__).parent / "data" / "results-small.json"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def results() -> dict:
    return json.loads(RESULTS.read_text())


def _pixels_of(path: Path, color: str):
    from matplotlib import colors, image

    pixels = image.imread(path)[:, :, :3]
    wanted = colors.to_rgb(color)
    return ((abs(pixels - wanted) < 0.02).all(axis=2)).sum()


def test_the_stored_results_render_as_a_png(results, tmp_path):
    output = tmp_path / "chart.png"
    drawn = chart.render(results, output)
    with_targets = [f for f in results["figures"] if f["status"] in ("met", "MISSED")]
    assert [f.name for f in drawn] == [f["name"] for f in with_targets]
    assert len(drawn) < len(results["figures"]), "the fixture must also hold info figures"
    assert output.read_bytes()[:8] == PNG_SIGNATURE
    from matplotlib import image

    height, width, _ = image.imread(output).shape
    assert width == 1100 and height >= 28 * len(drawn)
    # One bar colour per status present.
    assert (_pixels_of(output, chart.MET) > 0) == any(f.status == "met" for f in drawn)
    assert (_pixels_of(output, chart.MISSED) > 0) == any(f.status == "MISSED" for f in drawn)


def test_a_missed_target_is_drawn_red(results, tmp_path):
    for figure in results["figures"]:
        if figure["status"] == "met" and figure["kind"] == "ratio_max":
            figure["value"] = figure["target"] * 1.5
            break
    else:
        pytest.fail("the fixture has no met ratio_max figure")
    met_only = {**results, "figures": [f for f in results["figures"] if f["status"] != "MISSED"]}
    chart.render(met_only, tmp_path / "missed.png")
    assert _pixels_of(tmp_path / "missed.png", chart.MISSED) > 0


@pytest.mark.parametrize(
    ("kind", "value", "target", "share"),
    [
        ("ratio_max", 1.05, 1.10, 1.05 / 1.10),  # at most 1.10x: met below 1
        ("ratio_min", 0.72, 0.80, 0.80 / 0.72),  # at least 0.8x: missed above 1
        ("ratio_min", 1.60, 0.80, 0.5),
        ("abs_us_max", 7.5, 5.0, 1.5),
        ("abs_us_max", -2.0, 5.0, 0.0),  # openreg faster than the CPU
        ("ms_max", 75.0, 150.0, 0.5),
    ],
)
def test_budget_share_is_below_one_exactly_when_the_target_is_met(kind, value, target, share):
    figure = Figure(family="f", name="n", kind=kind, value=value, target=target)
    assert chart.budget_share(figure) == pytest.approx(share)
    assert (chart.budget_share(figure) <= 1) == (figure.status == "met")


def test_results_without_targets_are_refused(results, tmp_path):
    info_only = {**results, "figures": [f for f in results["figures"] if f["status"] == "info"]}
    assert info_only["figures"], "the fixture must hold info figures"
    with pytest.raises(ValueError, match="nothing to chart"):
        chart.render(info_only, tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()


def test_the_runner_writes_the_chart_next_to_the_results(results, tmp_path, capsys):
    run.write_chart(results, tmp_path / "results.png")
    assert (tmp_path / "results.png").read_bytes()[:8] == PNG_SIGNATURE
    assert "chart of" in capsys.readouterr().out


def test_the_command_line_names_a_missing_results_file(tmp_path):
    with pytest.raises(SystemExit, match="does not exist: run `uv run nox -s bench` first"):
        chart.main([str(tmp_path / "absent.json")])
    output = tmp_path / "out.png"
    assert chart.main([str(RESULTS), str(output)]) == 0
    assert output.read_bytes()[:8] == PNG_SIGNATURE
