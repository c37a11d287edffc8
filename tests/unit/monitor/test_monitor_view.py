"""The monitor view: bars, sparkline, hints, the no-GPU case (goldens at width 100)."""

from __future__ import annotations

import io

from rich.console import Console

from gpudoctor.records.gpu import GpuSample, HostSample
from gpudoctor.report.monitor_view import bar, history_by_gpu, render_monitor, sparkline

HOST = HostSample(timestamp_s=10.0, cpu_pct=97.0, busiest_core_pct=100.0,
                  ram_used_bytes=30 << 30, ram_total_bytes=64 << 30)


def _text(renderable) -> str:
    console = Console(file=io.StringIO(), width=100, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def _sample(t: float, util: float | None, **kw) -> GpuSample:
    base = dict(timestamp_s=t, index=0, name="NVIDIA H200", util_gpu_pct=util,
                mem_total_bytes=140 << 30, mem_used_bytes=70 << 30, mem_free_bytes=70 << 30)
    return GpuSample(**{**base, **kw})


def test_bar_clamps_and_marks_unknown():
    assert bar(0.0, 4) == "░░░░"
    assert bar(0.5, 4) == "██░░"
    assert bar(1.7, 4) == "████"
    assert bar(None, 4) == "····"


def test_sparkline_spans_the_levels_and_leaves_gaps():
    assert sparkline([0, 50, 100, None, 250]) == "▁▅█ █"


def test_no_gpu_shows_the_reason_and_the_host(golden):
    view = render_monitor([], host=HOST, gpu_unavailable="NVML could not start (no driver)")
    golden("monitor/view-no-gpu.txt", _text(view))


def test_low_util_with_heavy_pcie_rx_hints_at_copies():
    s = _sample(1.0, 35.0, pcie_rx_bytes_per_s=8e9, pcie_tx_bytes_per_s=1e8)
    text = _text(render_monitor([s], host=HOST))
    assert "hint: GPU 0 is 35% busy while PCIe rx is 8.0 GB/s" in " ".join(text.split())
    assert "no process holds GPU memory" in text


def test_busy_gpu_gets_no_hint():
    s = _sample(1.0, 99.0, pcie_rx_bytes_per_s=8e9)
    assert "hint" not in _text(render_monitor([s], host=HOST))


def test_history_by_gpu_splits_a_stream(golden):
    stream = [_sample(t, u) for t, u in enumerate([0, 10, 40, 90, None, 100])]
    stream += [_sample(t, 5.0 * t, index=1, name="NVIDIA H200", power_w=512.3) for t in range(3)]
    latest, history = history_by_gpu(stream)
    assert [s.index for s in latest] == [0, 1]
    assert [s.util_gpu_pct for s in history[0]] == [0, 10, 40, 90, None, 100]
    golden("monitor/view-two-gpus.txt", _text(render_monitor(latest, history)))


def test_the_gpu_table_fits_80_and_120_columns(golden):
    """Every number whole at 80 columns (bars shrink, the sparkline goes); all of it at 120."""
    from pathlib import Path

    from gpudoctor.collectors.sample_log import read_gpu_log, read_host_log

    fixtures = Path(__file__).resolve().parents[2] / "fixtures" / "monitor"
    latest, history = history_by_gpu(read_gpu_log(fixtures / "fake-samples.jsonl"))
    host = read_host_log(fixtures / "fake-samples.host.jsonl")[-1]
    for width in (80, 120):
        console = Console(file=io.StringIO(), width=width, color_system=None)
        console.print(render_monitor(latest, history, host, job_pids=frozenset(host.tree_pids)))
        text = console.file.getvalue()
        table = text.split("\n\n")[0]
        assert "…" not in table, table
        golden(f"monitor/view-fake-samples-{width}.txt", text)
