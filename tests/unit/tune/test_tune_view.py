"""Golden test of the control-variable table (every trial, the winner marked, notes, outputs)."""

from __future__ import annotations

import io

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
            Trial(knob="batch", setting="batch=486 (chosen)", params={"batch_size": 486}, verdict=TrialVerdict.OK,
                  steps=11, samples_per_s=14_900.0, step_ms=32.6, data_wait_ms=0.02, peak_mem_bytes=6 * GiB),
        ),
        winner="batch=486 (chosen)", params={"batch_size": 486, "eval_batch_size": 2048},
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
    ddp = KnobResult(knob="ddp", summary="time budget (240 s) spent; not tuned")
    return TuneResult(target="bench.tune:target", device="cuda:0 (NVIDIA H200)", world_size=2,
                      knobs=(precision, batch, ddp), config={"batch_size": 486}, loader={"eval_batch_size": 2048},
                      config_path="tuned.toml", loader_path="tuned.loader.toml", elapsed_s=61.4, interrupted=True)


def test_tune_table_golden(golden) -> None:
    buf = io.StringIO()
    Console(file=buf, width=100, color_system=None).print(render_tune(_result()))
    golden("tune/tune_view.txt", buf.getvalue())


def test_trial_lines_golden(golden) -> None:
    lines = [trial_line(t) for k in _result().knobs for t in k.trials]
    golden("tune/trial_lines.txt", "\n".join(lines) + "\n")


def test_result_round_trips_through_json() -> None:
    result = _result()
    assert from_dict(TuneResult, to_dict(result)) == result
