"""The report's charts draw the rules' own numbers: the leak trend is the leak rule's fit."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.analysis import timeline
from gpudoctor.analysis.facts import rank_stats
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.rundir import load_run
from gpudoctor.records.units import GIB
from gpudoctor.report import charts, html

RUNS = Path(__file__).resolve().parents[2] / "fixtures" / "runs"


def test_the_memory_chart_draws_the_leak_rules_fit(monkeypatch) -> None:
    run = load_run(RUNS / "leaky_loss")
    drawn: list[timeline.MemorySeries] = []
    real = charts.memory_chart
    monkeypatch.setattr(charts, "memory_chart", lambda mem: (drawn.append(mem), real(mem))[1])
    html.build_figures(run)
    assert [m.rank for m in drawn] == [0]
    leak = rank_stats(run, 0, Thresholds()).leak
    assert leak is not None and leak.slope > 0  # the workload leaks: the rule's fit sees it
    assert drawn[0].slope_gib_per_step * GIB == pytest.approx(leak.slope)
    assert drawn[0].intercept_gib * GIB == pytest.approx(leak.intercept)


def test_no_fit_no_trend_line() -> None:
    run = load_run(RUNS / "leaky_loss")
    series = timeline.memory_series(0, run.steps[0], None)
    assert series.step and series.slope_gib_per_step is None and series.intercept_gib is None


def test_the_slowest_rank_is_the_one_with_the_largest_steady_median() -> None:
    run = load_run(RUNS / "straggler-2gpu")
    stats = {r: rank_stats(run, r, Thresholds()) for r in run.steps}
    slowest = timeline.slowest_rank(stats)
    assert stats[slowest].step_ms == max(s.step_ms for s in stats.values())
