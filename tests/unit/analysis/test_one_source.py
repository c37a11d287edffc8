"""Every view of a recorded run quotes the same throughput and step figures.

The terminal findings table, the run summary table, ``--json``, the ``--try`` before/after
table and the HTML report all read :class:`gpudoctor.analysis.steps.RankStepStats`: replayed over
every recorded fixture (GPU and CPU recordings, whose steps are far from constant).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from gpudoctor.analysis.facts import run_facts
from gpudoctor.analysis.run_stats import run_stats
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.cli.diagnose import payload
from gpudoctor.records.base import to_dict
from gpudoctor.records.rundir import load_run
from gpudoctor.report.findings_view import breakdown_rows, breakdown_table
from gpudoctor.report.html import render_report
from gpudoctor.report.run_summary import render_summary
from gpudoctor.report.try_view import compare

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RUNS = sorted(p for d in ("runs", "runs_cpu") for p in (FIXTURES / d).glob("*/") if p.is_dir())


def _text(renderable) -> str:
    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None).print(renderable)
    return buf.getvalue()


@pytest.mark.parametrize("run_dir", RUNS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_view_quotes_the_same_throughput(run_dir: Path) -> None:
    run = load_run(run_dir)
    facts = run_facts(run, Thresholds())
    stats = run_stats(run)
    assert [s.rank for s in stats] == [rf.rank for rf in facts.ranks]
    steps_varied = False
    for s, rf in zip(stats, facts.ranks):
        rate, unit = rf.stats.throughput
        assert (s.throughput, s.unit) == (rate, unit)
        assert s.step_ms == rf.stats.step_ms and s.mean_step_ms == rf.stats.mean_step_ms
        assert rf.breakdown.step_ms == rf.stats.mean_step_ms
        steps_varied |= rf.stats.step_ms != rf.stats.mean_step_ms
        shown = f"{rate:,.0f}"
        # the terminal table, its HTML twin and the run summary table
        assert shown in _text(breakdown_table(facts))
        assert any(row[0] == str(rf.rank) and row[-1] == shown for row in breakdown_rows(facts)[1])
        assert f"{rate:.1f}" in _text(render_summary(run, full=True))
    assert steps_varied, "a fixture with constant steps proves nothing here"
    # --json
    data = json.loads(json.dumps(to_dict(payload(run, None))))
    assert [r["throughput"] for r in data["stats"]] == [s.throughput for s in stats]
    # --try: throughput summed over ranks
    total = sum(s.throughput for s in stats)
    assert compare(run, run).before["throughput"] == pytest.approx(total)
    # the HTML report's step table
    html = render_report(run, [])
    assert all(f"<td>{rf.stats.throughput[0]:,.0f}</td>" in html for rf in facts.ranks)
