"""The HTML report: self-contained, escaped, charts present, fast and small enough."""

from __future__ import annotations

import re

from run_factory import PLANTED, make_findings, make_run

from gpudoctor.records.rundir import load_run
from gpudoctor.report.html import render_report, write_report


def _skeleton(html: str) -> str:
    """The report without the embedded BokehJS and chart data, for the golden comparison."""
    html = re.sub(r"<script>\n/\* BEGIN bokeh\.min\.js \*/.*?</script>", "<script>BOKEHJS</script>",
                  html, flags=re.S)
    html = re.sub(r"<script>\n\(function\(\) \{.*?</script>", "<script>CHART-DATA</script>",
                  html, flags=re.S)
    html = re.sub(r"id=\"[0-9a-f-]{36}\"", 'id="UUID"', html)
    html = re.sub(r"data-root-id=\"[^\"]+\"", 'data-root-id="ID"', html)
    html = re.sub(r"run directory <code>[^<]*</code>", "run directory <code>RUNDIR</code>", html)
    html = re.sub(r"gpudoctor \d+\.\d+\.\d+", "gpudoctor VERSION", html)
    return html


def test_report_skeleton_golden(tmp_path, golden) -> None:
    run = load_run(make_run(tmp_path / "run"))
    html = render_report(run, make_findings())
    golden("report/report_skeleton.html", _skeleton(html))


def test_report_is_self_contained_and_has_every_chart(tmp_path) -> None:
    html = render_report(load_run(make_run(tmp_path / "run")), make_findings())
    # no external resources: scripts and styles are inline
    assert not re.search(r"<script[^>]+src=", html)
    assert not re.search(r"<link[^>]+stylesheet", html)
    for chart in ("gpu_util", "gpu_mem", "gpu_power", "steps_rank0", "memory_rank0"):
        assert f'id="chart-{chart}"' in html
    assert "Data-loader bound" in html and "expected gain: 38% of step time" in html


def test_user_strings_are_escaped(tmp_path) -> None:
    run = load_run(make_run(tmp_path / "run", planted=PLANTED))
    html = render_report(run, make_findings(PLANTED))
    # outside the JSON chart data, the planted markup only ever appears escaped
    text = re.sub(r"<script>\n\(function\(\) \{.*?</script>", "", html, flags=re.S)
    assert "<script>window.__pwned" not in text
    assert "&lt;/script&gt;&lt;script&gt;window.__pwned" in text
    # the chart data is inside the embed script: the planted "</script>" must not close it
    embed = re.search(r"<script>\n\(function\(\) \{(.*?)</script>", html, re.S).group(1)
    assert "window.__pwned" in embed and "</script" not in embed.lower()


def test_ten_minute_run_at_10hz_is_small(tmp_path) -> None:
    """Bar of issue 8: HTML <= 5 MB for a 10-minute run sampled at 10 Hz. Its other bar, <= 2 s,
    is timed by ``benchmarks/report_speed.py`` (median of 3, result in benchmarks/results/), not
    here: on a loaded 2-core CI box a timed test measures the box."""
    run = load_run(make_run(tmp_path / "run", seconds=600, hz=10, steps=1500))
    path = write_report(run, make_findings())
    size = path.stat().st_size
    assert size <= 5 * 1024 * 1024, f"report is {size / 1e6:.1f} MB"
    html = path.read_text()
    assert "Data-loader bound" in html  # the whole report, not a truncated one


def test_missing_parts_are_said_not_crashed(tmp_path) -> None:
    run_path = make_run(tmp_path / "run")
    for name in ("gpu.jsonl", "env.json", "steps-rank0.jsonl", "config-rank0.json"):
        (run_path / name).unlink()
    html = render_report(load_run(run_path), [])
    assert "No GPU samples or step records were gathered." in html
    assert "The environment was not checked" in html
    assert "No problems found" in html


def test_verified_fix_section(tmp_path) -> None:
    from gpudoctor.analysis.try_compare import judge
    from gpudoctor.report.try_view import TryComparison

    keys = ("throughput", "step_ms", "data_wait_ms", "gpu_ms", "h2d_ms", "host_syncs")
    before = dict(zip(keys, (7210.0, 18.4, 14.4, 18.8, 0.37, 1.0)))
    after = dict(zip(keys, (29286.9, 4.25, 0.10, 4.59, 0.18, 1.0)))
    judgement = judge([7210.0, 7250.0], [29286.9, 29000.0])
    comparison = TryComparison(knobs=("num_workers=8", "pin_memory"), unit="samples/s",
                               before=before, after=after, gain=judgement.gain, judgement=judgement,
                               notes=("non_blocking: not applied: no copy from pinned host memory",))
    html = render_report(load_run(make_run(tmp_path / "run")), make_findings(), comparison)
    assert "The fix, verified" in html and "--try num_workers=8,pin_memory" in html
    assert "<li>non_blocking: not applied: no copy from pinned host memory</li>" in html
    assert ("<td>throughput (samples/s, median of runs)</td><td>7,210.0</td><td>29,286.9</td>"
            "<td>+306%</td>") in html
    assert ("measured gain: +303% ± 1.0% throughput with num_workers=8, pin_memory "
            "(n = 2 baseline + 2 try runs): above the run-to-run noise; apply it") in html


def test_many_ranks_share_overlay_charts(tmp_path) -> None:
    """With more than two ranks: one step-time and one memory overlay, plus the per-rank
    breakdown of rank 0 and of the slowest rank only (chart count stays bounded)."""
    from gpudoctor.report.html import build_figures

    names = list(build_figures(load_run(make_run(tmp_path / "run", ranks=4, seconds=5))))
    # every rank has the same steps here, so the slowest is rank 0 (ties go to the lowest rank)
    assert names == ["gpu_util", "gpu_mem", "gpu_power", "steps_ranks", "memory_ranks",
                     "steps_rank0", "memory_rank0"]


def test_memory_run_sections(tmp_path) -> None:
    """A `gpudoctor memory run` directory: the stage table and, after an OOM, the live sites."""
    import memory_run_data

    run = memory_run_data.run_data(oom=memory_run_data.oom())
    run.path = tmp_path
    html = render_report(run, [])
    assert "<h2>Memory by stage</h2>" in html and 'id="memory-stages"' in html
    assert "<td>forward</td><td>510.0 MiB</td><td>+400.0 MiB</td>" in html
    assert "<h2>Out of memory: what was live</h2>" in html and 'id="oom-sites"' in html
