"""Golden tests of the rendered ``gpudoctor bench`` table from fixed, judged results."""

from __future__ import annotations

import io

import pytest

from rich.console import Console

from gpudoctor.analysis.bench_rules import judge
from gpudoctor.records.base import from_dict, to_dict
from gpudoctor.records.bench import BenchReport
from gpudoctor.report.bench_view import num, render_bench


def _render(report: BenchReport, width: int = 100) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(render_bench(judge(report)))
    return console.file.getvalue()


def test_gpu_report_golden(gpu_report, golden) -> None:
    golden("bench/gpu_report.txt", _render(gpu_report))


def test_cpu_report_golden(cpu_report, golden) -> None:
    golden("bench/cpu_report.txt", _render(cpu_report))


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("which", ["gpu", "cpu"])
def test_report_golden_at_80_and_120_columns(request, golden, which: str, width: int) -> None:
    """Nothing cropped at 80 columns: a table too wide for the terminal is stacked."""
    text = _render(request.getfixturevalue(f"{which}_report"), width)
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= width
    golden(f"bench/{which}_report_{width}.txt", text)


def test_low_figures_and_skips_are_visible(gpu_report) -> None:
    text = _render(gpu_report)
    assert text.count("LOW") >= 3  # fp16, d2h_pinned, all_gather rows (+ their notes)
    assert "fp8 — example skip reason" in text
    assert "NVLink 18 active" in text and "P2P with GPU 1" in text
    assert "NCCL_NVLS_ENABLE=0" in text


def test_missing_link_readings_print_na(gpu_report) -> None:
    from dataclasses import replace

    from gpudoctor.records.bench import LinkState

    bare = LinkState(index=0, unavailable={"pcie": "NVML unavailable (NVMLError_LibraryNotFound)"})
    text = _render(replace(gpu_report, links=(bare,)))
    assert "PCIe n/a" in text and "NVLink n/a active" in text
    assert "not readable: pcie: NVML unavailable (NVMLError_LibraryNotFound)" in text


def test_report_round_trips_through_json(gpu_report) -> None:
    judged = judge(gpu_report)
    assert from_dict(BenchReport, to_dict(judged)) == judged


def test_num_formats() -> None:
    assert [num(None), num(784.2), num(55.46), num(0.934), num(4270.0)] == ["n/a", "784", "55.5", "0.93", "4,270"]
