"""The self-contained HTML report of a run: verdict, finding cards, charts, environment, config.

One file, no network: BokehJS and the CSS are embedded once. Every user-supplied string (the
command, GPU names, file names, finding text) passes through Jinja2's autoescaping; chart data
travels as JSON inside ``<script type="application/json">``, which Bokeh escapes.
"""

from __future__ import annotations

import datetime
from dataclasses import fields, is_dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from gpudoctor.analysis import timeline
from gpudoctor.analysis.facts import rank_stats
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.atomic import write_text_atomic
from gpudoctor.records.finding import Finding, rank_findings
from gpudoctor.records.rundir import REPORT, RunData
from gpudoctor.records.units import MISSING, human_bytes
from gpudoctor.report import charts
from gpudoctor.report.try_view import TryComparison, try_rows, try_verdict

# Each chart is a Bokeh document model, and building them is what costs time: with more ranks
# than this, the per-rank breakdown is drawn for rank 0 and the slowest rank only, and every
# rank's step time and allocated memory share one overlay chart each.
MAX_RANK_CHARTS = 2


def _when(ts: float | None) -> str:
    if ts is None:
        return MISSING
    return datetime.datetime.fromtimestamp(ts, tz=datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S UTC"
    )


def _plain(value: Any) -> str:
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (tuple, list)):
        return ", ".join(_plain(v) for v in value) or "—"
    if is_dataclass(value):
        return "; ".join(f"{f.name}={_plain(getattr(value, f.name))}" for f in fields(value))
    return str(value)


def config_rows(run: RunData) -> list[tuple[str, list[str]]]:
    """(setting, value per rank) rows of the ranks' configuration, loaders last."""
    ranks = sorted(run.configs)
    if not ranks:
        return []
    skip = {"rank", "loaders"}
    rows = []
    for f in fields(run.configs[ranks[0]]):
        if f.name in skip:
            continue
        rows.append((f.name, [_plain(getattr(run.configs[r], f.name)) for r in ranks]))
    for r in ranks:
        for i, loader in enumerate(run.configs[r].loaders):
            rows.append((f"rank {r} loader {i}", [_plain(loader)] + [""] * (len(ranks) - 1)))
    return rows


def build_figures(run: RunData, thresholds: Thresholds | None = None) -> dict[str, object]:
    """The report's charts, by name; a chart is left out when its data is missing.
    ``thresholds``: those the findings were made with (default: the defaults)."""
    figures: dict[str, object] = {}
    series = timeline.gpu_series(run.gpu)
    if series:
        figures["gpu_util"] = charts.gpu_chart(series, "util_pct", "GPU utilization", "%")
        figures["gpu_mem"] = charts.gpu_chart(series, "mem_used_gib", "GPU memory used", "GiB")
        if any(v is not None for s in series for v in s.power_w):
            figures["gpu_power"] = charts.gpu_chart(series, "power_w", "GPU power", "W")
    stats = {r: s for r in sorted(run.steps) if (s := rank_stats(run, r, thresholds or Thresholds())) is not None}
    ranks = list(stats)
    breakdowns = {r: timeline.step_breakdown(r, run.steps[r]) for r in ranks}
    memories = {r: timeline.memory_series(r, run.steps[r], stats[r].leak) for r in ranks}
    if len(ranks) > MAX_RANK_CHARTS:
        figures["steps_ranks"] = charts.rank_overlay_chart(
            {r: (b.step, b.step_ms) for r, b in breakdowns.items()}, "Step time per rank", "ms")
        if any(m.step for m in memories.values()):
            figures["memory_ranks"] = charts.rank_overlay_chart(
                {r: (m.step, m.allocated_gib) for r, m in memories.items() if m.step},
                "Allocated memory per rank", "GiB")
        slowest = timeline.slowest_rank(stats)
        ranks = sorted({ranks[0], slowest})
    for rank in ranks:
        figures[f"steps_rank{rank}"] = charts.step_chart(breakdowns[rank])
        if memories[rank].step:
            figures[f"memory_rank{rank}"] = charts.memory_chart(memories[rank])
    return figures


def render_report(run: RunData, findings: list[Finding] | tuple[Finding, ...],
                  verified: TryComparison | None = None, *, price_per_gpu_hour: float | None = None,
                  thresholds: Thresholds | None = None) -> str:
    """Render the whole report as one HTML string.

    ``verified``: a ``--try`` re-run of the same command with the fix injected; shown as the
    before/after table right under the verdict. ``price_per_gpu_hour``: add the cost table.
    ``thresholds``: those the findings were made with (``--thresholds``; default: the defaults).
    """
    th = thresholds or Thresholds()
    from jinja2 import Environment, select_autoescape

    from gpudoctor import __version__

    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True))
    env.filters["pct"] = lambda v: MISSING if v is None else f"{v * 100:.0f}%"
    template_text = (
        resources.files("gpudoctor.report").joinpath("templates/report.html.j2").read_text("utf-8")
    )
    ranked = rank_findings(list(findings))
    memory = None
    if run.memory:  # `gpudoctor memory run`: the stage table and, after an OOM, the top sites
        from gpudoctor.analysis.memory_stages import analyse_memory_run
        from gpudoctor.report.memory_view import stage_cells

        memory = analyse_memory_run(run, th)
        memory_rows = [stage_cells(r) for r in memory.rows]
        oom_rows = [(s.site, human_bytes(s.bytes), f"{s.share:.0%}") for s in memory.oom_sites]
    else:
        memory_rows, oom_rows = [], []
    from gpudoctor.analysis.facts import run_facts
    from gpudoctor.report.findings_view import breakdown_notes, breakdown_rows, top_rows

    facts = run_facts(run, th)
    step_header, step_rows = breakdown_rows(facts)
    top_kernels, top_ops = top_rows(facts, 10)
    cost_heading_text, cost_table = _cost(facts, ranked, verified, price_per_gpu_hour)
    figure_map = build_figures(run, th)
    rendered = charts.render_charts(figure_map)
    manifest = run.manifest
    return env.from_string(template_text).render(
        title=f"gpudoctor report — {' '.join(manifest.command) or run.path.name}",
        manifest=manifest,
        command=" ".join(manifest.command),
        started=_when(manifest.started_at),
        ended=_when(manifest.ended_at),
        findings=ranked,
        problems=[f for f in ranked if f.severity.value != "info"],
        env=run.env,
        config_ranks=sorted(run.configs),
        config_rows=config_rows(run),
        charts=rendered,
        chart_names=list(figure_map),
        version=__version__,
        run_path=str(run.path),
        verified=verified,
        memory=memory,
        memory_rows=memory_rows,
        oom_rows=oom_rows,
        step_header=step_header,
        step_rows=step_rows,
        step_notes=[t.plain for t in breakdown_notes(facts)],
        top_kernels=top_kernels,
        top_ops=top_ops,
        verified_rows=try_rows(verified) if verified is not None else [],
        verified_verdict=try_verdict(verified) if verified is not None else "",
        cost_heading=cost_heading_text,
        cost_rows=cost_table,
    )


def _cost(facts: Any, findings: list[Finding], verified: TryComparison | None,
          price: float | None) -> tuple[str, list[tuple[str, str]]]:
    """The cost table's heading and rows (empty without a price or without steps)."""
    if price is None:
        return "", []
    from gpudoctor.analysis.cost import run_cost, try_savings
    from gpudoctor.report.cost_view import cost_heading, cost_rows

    cost = run_cost(facts, findings, price)
    if cost is None:
        return "", []
    savings = try_savings(cost, verified) if verified is not None else None
    unverified = tuple(verified.knobs) if verified is not None and savings is None else ()
    return cost_heading(cost), cost_rows(cost, savings, unverified)


def write_report(run: RunData, findings: list[Finding] | tuple[Finding, ...],
                 out: Path | None = None, *, verified: TryComparison | None = None,
                 price_per_gpu_hour: float | None = None, thresholds: Thresholds | None = None) -> Path:
    """Render and write the report (default ``RUNDIR/report.html``); return its path."""
    path = Path(out) if out is not None else run.path / REPORT
    text = render_report(run, findings, verified, price_per_gpu_hour=price_per_gpu_hour, thresholds=thresholds)
    write_text_atomic(path, text)
    return path


__all__ = ["build_figures", "config_rows", "render_report", "write_report"]
