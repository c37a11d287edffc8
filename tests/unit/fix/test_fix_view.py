"""What ``gpudoctor fix`` prints about its measurements: each change's verdict, the before/after table
and the first steps' loss, at 80 and 120 columns."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from gpudoctor.analysis.try_compare import TryComparison, judge
from gpudoctor.fix.ops import Advice, Change
from gpudoctor.fix.view import Figures, Outcome, advice_lines, change_line, loss_table, table

ROWS = ("throughput", "step_ms", "data_wait_ms", "gpu_ms", "h2d_ms", "host_syncs")


def comparison(before: list[float], after: list[float]) -> TryComparison:
    j = judge(before, after)
    mid = {"throughput": sorted(before)[len(before) // 2], "step_ms": 17.6}
    return TryComparison(knobs=(), unit="samples/s", before={k: mid.get(k) for k in ROWS},
                         after={k: (sorted(after)[len(after) // 2] if k == "throughput" else 4.1 if k == "step_ms"
                                    else None) for k in ROWS}, gain=j.gain, judgement=j)


def render(width: int) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    loader = Change(kind="loader", code="GD-RUN-DATALOADER", why="workers", ops=())
    bf16 = Change(kind="bf16", code="GD-RUN-FP32-COMPUTE", why="precision", ops=(), precision=True)
    item = Change(kind="item", code="GD-RUN-HOST-SYNC", why="sum on device", ops=())
    outcomes = [
        Outcome(change=loader, comparison=comparison([6856.4, 6901.2, 6790.0], [29949.3, 30102.5, 29870.1])),
        Outcome(change=bf16, comparison=comparison([6856.4, 6901.2], [6100.0, 6150.3]), kept=False),
        Outcome(change=item, comparison=comparison([6856.4, 6901.2, 6700.0, 7000.0], [6870.0, 6920.0, 6650.0, 7100.0]),
                kept=False),
    ]
    for i, outcome in enumerate(outcomes, 1):
        console.print(change_line(i, outcome), highlight=False, markup=False)
    for line in advice_lines([Advice(code="GD-RUN-LAUNCH-BOUND", reason="compile: the model was not found",
                                     fix="model = torch.compile(model)")]):
        console.print(line, highlight=False, markup=False, soft_wrap=True)  # as gpudoctor fix prints them
    console.print(table(Figures(throughput=6856.4, step_ms=17.6, gpu_busy=0.063, mfu=0.004),
                        Figures(throughput=29949.3, step_ms=4.1, gpu_busy=0.27, mfu=0.018), "before/after"))
    console.print(table(Figures(throughput=34.8, step_ms=757.5), None, "before (the patch was not measured)"))
    console.print(loss_table([2.31, 2.29, 2.27, None], [2.31, 2.30, 2.26, 2.20], ["bf16"]))
    console.print(loss_table([1.0, 0.5], [1.1, 0.4], []))
    return console.file.getvalue()


@pytest.mark.parametrize("width", [80, 120])
def test_fix_report_golden(width: int, golden) -> None:
    text = render(width)
    assert "measured gain: +" in text and "-> dropped" in text and "precision changed (bf16)" in text
    golden(f"fix/report-{width}.txt", text)
