"""The batch knob's memory model on the CPU: with peak memory reported (as a GPU does), the bracket
the first OOM makes is narrowed around the limit the memory line predicts, in two probes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpudoctor.records.tune import TrialVerdict
from gpudoctor.tune import batch
from gpudoctor.tune.session import TuneOptions, tune
from gpudoctor.tune.trials import TrialRunner

OOM_REF = f"{Path(__file__).parent / 'tiny_target.py'}:oom_target"  # OOM above 100 samples
MAX = TuneOptions(steps=2, warmup=1, window_s=0.0, batch_pick="max")


def _with_memory(monkeypatch: pytest.MonkeyPatch, per_sample: int, capacity: float) -> None:
    """CPU trials report no peak memory: give each trial that fit ``per_sample`` bytes a sample,
    and the GPU ``capacity`` bytes."""
    real_run = TrialRunner.run

    def run(self, spec):
        trial = real_run(self, spec)
        if trial.verdict is TrialVerdict.OK:
            trial = dataclasses.replace(trial, peak_mem_bytes=per_sample * spec.batch_size)
        return trial

    monkeypatch.setattr(TrialRunner, "run", run)
    monkeypatch.setattr(batch, "_capacity", lambda ctx: capacity)


def _probed(knob) -> list[int]:
    return [t.params["batch_size"] for t in knob.trials if t.knob == "batch" and not t.setting.endswith(")")]


def _batch(result):
    return next(k for k in result.knobs if k.knob == "batch")


def test_memory_line_narrows_the_bracket_in_two_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    _with_memory(monkeypatch, per_sample=10, capacity=1005.0)  # the line says 100: the real limit
    knob = _batch(tune(["batch"], target_ref=OOM_REF, options=MAX))
    assert _probed(knob) == [16, 32, 64, 128, 100, 101]  # bisection would take 96, 112, 104, 100, 102, 101
    assert knob.params["max_batch_size"] == 95  # 100 minus the 5% margin, as without the line
    assert any("puts the limit near 100 (inside the bracket 64..128)" in n for n in knob.notes), knob.notes


def test_a_wrong_memory_line_still_finds_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    _with_memory(monkeypatch, per_sample=10, capacity=1205.0)  # the line says 120: 20% too high
    knob = _batch(tune(["batch"], target_ref=OOM_REF, options=MAX))
    assert knob.params["max_batch_size"] == 95
    probes = _probed(knob)
    assert 100 in probes and 101 in probes and len(probes) <= 4 + 2 * 6 + 2


def test_no_memory_figures_means_plain_bisection() -> None:
    knob = _batch(tune(["batch"], target_ref=OOM_REF, options=MAX))
    assert _probed(knob) == [16, 32, 64, 128, 96, 112, 104, 100, 102, 101]
    assert not any("puts the limit near" in n for n in knob.notes)
