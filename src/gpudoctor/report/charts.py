"""Interactive charts for the HTML report, drawn with Bokeh (BokehJS embedded once, inline).

Bokeh was chosen over Plotly because its JavaScript is ~1.3 MB inline against Plotly's 4.8 MB
(the report must stay under 5 MB and work offline), and it is interactive (pan, zoom, hover).
Only drawing happens here: the numbers come from :mod:`gpudoctor.analysis.timeline`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from gpudoctor.analysis.timeline import GpuSeries, MemorySeries, StepBreakdown

PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")
WIDTH = 900


@dataclass(frozen=True)
class Charts:
    """Rendered chart markup: one ``<script>`` for all charts plus one ``<div>`` per chart."""

    script: str
    divs: dict[str, str]
    bokeh_js: str


def _figure(title: str, y_label: str, x_label: str, height: int = 260):
    from bokeh.plotting import figure

    fig = figure(
        title=title,
        height=height,
        width=WIDTH,
        sizing_mode="stretch_width",
        tools="pan,wheel_zoom,box_zoom,reset,save,hover",
        toolbar_location="right",
    )
    fig.xaxis.axis_label = x_label
    fig.yaxis.axis_label = y_label
    fig.toolbar.logo = None
    return fig


def _none_to_nan(values: list[float | None]) -> list[float]:
    return [float("nan") if v is None else v for v in values]


def gpu_chart(series: list[GpuSeries], metric: str, title: str, unit: str):
    """One line per GPU of ``metric`` ("util_pct", "mem_used_gib" or "power_w") over time."""
    from bokeh.models import ColumnDataSource, HoverTool

    fig = _figure(title, unit, "time since start (s)")
    for i, s in enumerate(series):
        source = ColumnDataSource({"t": s.t_s, "y": _none_to_nan(getattr(s, metric))})
        fig.line("t", "y", source=source, color=PALETTE[i % len(PALETTE)], line_width=1.5,
                 legend_label=f"GPU {s.index}: {s.name}")
    fig.select_one(HoverTool).tooltips = [("t", "@t{0.0} s"), (unit, "@y{0.0}")]
    fig.legend.location = "top_left"
    fig.legend.click_policy = "hide"
    return fig


PARTS = ("data_wait_ms", "h2d_ms", "compute_ms", "other_ms")
PART_LABELS = ("data wait", "H2D copies", "GPU span (CUDA events)", "other host time")


def _y_top(ordered: list[float]) -> float:
    """An axis top that shows the typical steps: 1.5x the 90th percentile, at least the median x2."""
    if not ordered:
        return 1.0
    p90 = statistics.quantiles(ordered, n=10, method="inclusive")[-1] if len(ordered) > 1 else ordered[0]
    return max(p90 * 1.5, statistics.median(ordered) * 2.0, 1e-3)


def step_chart(breakdown: StepBreakdown):
    """Stacked bars: each step's wall time split into data wait, H2D, GPU compute, other."""
    from bokeh.models import ColumnDataSource, HoverTool

    data = {"step": breakdown.step, **{p: getattr(breakdown, p) for p in PARTS},
            "total": breakdown.step_ms}
    title = f"Step time breakdown, rank {breakdown.rank}"
    if breakdown.group > 1:
        title += f", averaged over groups of {breakdown.group} steps"
    ordered = sorted(breakdown.step_ms)
    top = _y_top(ordered)
    if ordered and ordered[-1] > top:  # warm-up steps (CUDA init, cuDNN autotune) dwarf the rest
        title += f" (axis clipped at {top:.0f} ms; the slowest step took {ordered[-1]:.0f} ms)"
    fig = _figure(title, "ms", "optimizer step")
    if ordered:
        from bokeh.models import Range1d

        fig.y_range = Range1d(0, top)
    fig.vbar_stack(list(PARTS), x="step", width=0.85 * breakdown.group, color=list(PALETTE[:4]),
                   source=ColumnDataSource(data), legend_label=list(PART_LABELS))
    fig.select_one(HoverTool).tooltips = [("step", "@step"), ("total", "@total{0.0} ms")] + [
        (label, f"@{part}{{0.0}} ms") for part, label in zip(PARTS, PART_LABELS)
    ]
    fig.legend.location = "top_right"
    fig.legend.click_policy = "hide"
    return fig


def memory_chart(mem: MemorySeries):
    """Allocated, reserved and peak per step, with the fitted leak trend as a dashed line."""
    from bokeh.models import ColumnDataSource, HoverTool

    fig = _figure(f"Allocator memory per step, rank {mem.rank}", "GiB", "optimizer step")
    source = ColumnDataSource({"step": mem.step, "allocated": mem.allocated_gib,
                               "reserved": mem.reserved_gib, "peak": mem.peak_gib})
    for i, (key, label) in enumerate((("allocated", "allocated"), ("reserved", "reserved"),
                                      ("peak", "peak allocated"))):
        fig.line("step", key, source=source, color=PALETTE[i], line_width=1.8, legend_label=label)
    if mem.slope_gib_per_step is not None and mem.step:
        xs = [mem.step[0], mem.step[-1]]
        ys = [mem.intercept_gib + mem.slope_gib_per_step * x for x in xs]
        mib = mem.slope_gib_per_step * 1024
        fig.line(xs, ys, color="#222222", line_dash="dashed", line_width=1.2,
                 legend_label=f"trend of allocated: {mib:+.2f} MiB/step")
    fig.select_one(HoverTool).tooltips = [("step", "@step"), ("allocated", "@allocated{0.000} GiB"),
                                          ("reserved", "@reserved{0.000} GiB"),
                                          ("peak", "@peak{0.000} GiB")]
    fig.legend.location = "top_left"
    fig.legend.click_policy = "hide"
    return fig


def rank_overlay_chart(series: dict[int, tuple[list[int], list[float]]], title: str, unit: str):
    """One line per rank (x: optimizer step) — for runs with many ranks."""
    from bokeh.models import HoverTool

    fig = _figure(title, unit, "optimizer step")
    for i, (rank, (xs, ys)) in enumerate(sorted(series.items())):
        fig.line(xs, ys, color=PALETTE[i % len(PALETTE)], line_width=1.2, legend_label=f"rank {rank}")
    fig.select_one(HoverTool).tooltips = [("step", "$x{0}"), (unit, "$y{0.00}")]
    fig.legend.location = "top_right"
    fig.legend.click_policy = "hide"
    return fig


def render_charts(figures: dict[str, object]) -> Charts:
    """Embed ``figures`` (name -> Bokeh figure) as one script + divs, with BokehJS inline."""
    from bokeh.embed import components
    from bokeh.resources import Resources

    js = Resources(mode="inline", components=["bokeh"]).render_js()
    if not figures:
        return Charts(script="", divs={}, bokeh_js="")
    script, divs = components(figures)
    return Charts(script=script, divs=dict(divs), bokeh_js=js)
