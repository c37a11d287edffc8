"""Golden test of the control-variable table (every trial, the winner marked, notes, outputs)."""

from __future__ import annotations

import io

import pytest

from rich.console import Console

from gpudoctor.records.base import from_dict, to_dict
from gpudoctor.records.tune import KnobResult, Trial, TrialVerdict, TuneResult
from gpudoctor.report.tune_view import render_tune, trial_line

GiB = 2**30


def _result() -> TuneResult:
    batch = KnobResult(
        knob="batch",
        trials=(
            Trial(knob="batch", setting="batch=256", params={"batch_size": 256}, verdict=TrialVerdict.OK, steps=6,
                  samples_per_s=9_800.0, step_ms=26.1, data_wait_ms=0.02, peak_mem_bytes=3 * GiB),
            Trial(knob="batch", setting="batch=512", params={"batch_size": 512}, verdict=TrialVerdict.OK, steps=6,
                  samples_per_s=15_100.0, step_ms=33.9, data_wait_ms=0.02, peak_mem_bytes=6 * GiB),
            Trial(knob="batch", setting="batch=1024", params={"batch_size": 1024}, verdict=TrialVerdict.OOM,
                  reason="out of memory (torch.OutOfMemoryError)"),
            Trial(knob="eval_batch", setting="eval batch=2048", params={"eval_batch_size": 2048},
                  verdict=TrialVerdict.OK, steps=10, samples_per_s=41_000.0, step_ms=49.9, peak_mem_bytes=5 * GiB),
            Trial(knob="batch", setting="batch=256 (starting)", params={"batch_size": 256}, verdict=TrialVerdict.OK,
                  steps=15, samples_per_s=9_700.0, step_ms=26.4, data_wait_ms=0.02, peak_mem_bytes=3 * GiB,
                  rates=(9_650.0, 9_750.0), spread=0.005),
            Trial(knob="batch", setting="batch=486 (candidate)", params={"batch_size": 486}, verdict=TrialVerdict.OK,
                  steps=15, samples_per_s=14_900.0, step_ms=32.6, data_wait_ms=0.02, peak_mem_bytes=6 * GiB,
                  rates=(14_600.0, 15_200.0), spread=0.02),
        ),
        winner="batch=486 (candidate)", params={"batch_size": 486, "eval_batch_size": 2048},
        summary="per-device batch 486 (largest that fit: 512); eval batch 2048",
        notes=("largest batch that fit: 512; first that did not: 1024; margin 5% -> 486",),
    )
    precision = KnobResult(
        knob="precision",
        trials=(
            Trial(knob="precision", setting="fp32", params={"precision.dtype": "fp32"}, verdict=TrialVerdict.OK,
                  steps=11, samples_per_s=4_000.0, step_ms=32.0, loss=2.3),
            Trial(knob="precision", setting="fp16", params={"precision.dtype": "fp16"},
                  verdict=TrialVerdict.REJECTED, reason="non-finite loss", skipped_steps=3),
            Trial(knob="precision", setting="fp32 compile=on", params={"perf.compile": True},
                  verdict=TrialVerdict.SKIPPED, reason="torch.compile is only tried on a GPU"),
        ),
        winner="fp32", params={"precision.dtype": "fp32"}, summary="fp32",
    )
    ddp = KnobResult(knob="ddp", summary="cut by the budget plan (the budget had 12 s left for it); it needs ~95 s "
                                         "for ~13 trials: raise --budget-s")
    confirm = KnobResult(knob="confirm", trials=(
        Trial(knob="confirm", setting="starting configuration (batch 256)", params={}, verdict=TrialVerdict.OK,
              steps=120, samples_per_s=9_500.0, step_ms=26.9, data_wait_ms=0.4, rates=(9_400.0, 9_500.0, 9_600.0),
              spread=0.011),
        Trial(knob="confirm", setting="tuned configuration (batch 486)", params={}, verdict=TrialVerdict.OK,
              steps=110, samples_per_s=9_300.0, step_ms=52.3, data_wait_ms=21.0, rates=(9_000.0, 9_300.0, 9_500.0),
              spread=0.027)),
        winner="starting configuration (batch 256)",
        summary="tuned 9,300 vs starting 9,500 samples/s, 0.98x round by round (inside the +-3% noise): the "
                "starting configuration is kept and nothing is written")
    return TuneResult(target="bench.tune:target", device="cuda:0 (NVIDIA H200)", world_size=2,
                      knobs=(precision, batch, ddp, confirm), config={"batch_size": 256}, loader={},
                      elapsed_s=61.4, kept_start=True, plan=("budget 300 s",))


@pytest.mark.parametrize("width", [80, 120])
def test_tune_table_golden(golden, width: int) -> None:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None).print(render_tune(_result()))
    text = buf.getvalue()
    assert "…" not in text  # nothing cropped: a table too wide for the width is stacked
    assert max(len(line) for line in text.splitlines()) <= width
    golden(f"tune/tune_view_{width}.txt", text)


def _noisy_result() -> TuneResult:
    """The confirmation on a busy shared machine: one round in three disturbed; its summary is the
    one the session writes (``confirm.decide``)."""
    import dataclasses

    from gpudoctor.tune.confirm import decide

    start = Trial(knob="confirm", setting="starting configuration (batch 16)", params={}, verdict=TrialVerdict.OK,
                  steps=40, samples_per_s=1_600.0, step_ms=10.0, rates=(1_600.0, 1_600.0, 1_600.0), spread=0.0)
    tuned = Trial(knob="confirm", setting="tuned configuration (batch 95)", params={}, verdict=TrialVerdict.OK,
                  steps=40, samples_per_s=1_920.0, step_ms=49.5, rates=(1_920.0, 1_920.0, 43_200.0), spread=10.75)
    write, why = decide(start, tuned, 0.03)
    assert not write
    confirm = KnobResult(knob="confirm", trials=(start, tuned), winner=start.setting, summary=why)
    return dataclasses.replace(_result(), knobs=(confirm,), world_size=1, device="cpu")


@pytest.mark.parametrize("width", [80, 120])
def test_too_noisy_to_confirm_golden(golden, width: int) -> None:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None).print(render_tune(_noisy_result()))
    text = buf.getvalue()
    assert "too noisy to confirm" in text and "…" not in text
    assert max(len(line) for line in text.splitlines()) <= width
    golden(f"tune/tune_view_noisy_{width}.txt", text)


def test_trial_lines_golden(golden) -> None:
    lines = [trial_line(t) for k in _result().knobs for t in k.trials]
    golden("tune/trial_lines.txt", "\n".join(lines) + "\n")


def test_result_round_trips_through_json() -> None:
    result = _result()
    assert from_dict(TuneResult, to_dict(result)) == result
