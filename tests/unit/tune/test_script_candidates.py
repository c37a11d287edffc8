"""Script mode's candidates come from knob names checked by ``parse_knobs`` at run time: a knob the
other branch adds (bf16, channels_last, compile, ...) is tried once it exists, and skipped with the
reason until then. The runs are faked here (no child processes): the decisions are under test."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.records.tune import Trial, TrialVerdict
from gpudoctor.tune import script

FACTORS = {"bf16": 1.6, "fp16": 1.62, "channels_last": 1.1, "cudnn_benchmark": 1.0, "tf32": 1.0, "compile": 0.9}


def _fake(monkeypatch: pytest.MonkeyPatch, *, interrupt_at: int | None = None) -> list[str]:
    specs: list[str] = []

    def measure(command, knobs, run_dir, *, steps, warmup, knob, setting, params, **kw):
        specs.append(knobs)
        if interrupt_at is not None and len(specs) == interrupt_at:
            raise KeyboardInterrupt
        run_dir.mkdir(parents=True)
        rate = 1000.0 * (1 + 0.002 * (len(specs) % 3))  # +-0.2% run-to-run noise
        for name in knobs.split(","):
            rate *= FACTORS.get(name, 1.0)
        return Trial(knob=knob, setting=setting, params=params, verdict=TrialVerdict.OK, steps=warmup + steps,
                     samples_per_s=rate, step_ms=256e3 / rate, wall_s=1.0)

    monkeypatch.setattr(script, "measure", measure)
    monkeypatch.setattr(script, "_cuda", lambda: True)
    return specs


def test_candidates_by_name_known_ones_tried_unknown_ones_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    specs = _fake(monkeypatch)
    result = script.tune_script(["all"], ("python", "train.py"), steps=10, warmup=5, worker_counts=(4, 8))
    precision = next(k for k in result.knobs if k.knob == "script:precision")
    rows = {t.setting: t for t in precision.trials}
    for name in ("bf16", "fp16", "channels_last", "compile"):
        why = script.available(name)
        tried = [s for s in rows if s == name or s.endswith(f"+{name}")]
        assert tried, rows.keys()
        if why is None:  # this branch's --try knows it: it ran, with its spread
            assert rows[tried[0]].verdict is TrialVerdict.OK and rows[tried[0]].spread is not None
        else:  # not (yet) injectable: skipped with the reason, never run
            assert rows[tried[0]].verdict is TrialVerdict.SKIPPED and "cannot inject" in rows[tried[0]].reason
            assert not any(name in s.split(",") for s in specs)
    final = next(k for k in result.knobs if k.knob == "script:result")
    if script.available("bf16") is None:  # bf16 beats fp32 by 1.6x; fp16's 1.62x is inside the noise of it
        assert "--try bf16" in final.summary and "fp16" not in result.loader["try"]
    assert "compile" not in result.loader["try"]  # slower: not taken
    assert result.run_dirs is None  # every run ran cleanly: the temp folder is removed


def test_ctrl_c_keeps_the_finished_trials_and_names_the_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(monkeypatch, interrupt_at=4)
    result = script.tune_script(["all"], ("python", "train.py"), steps=10, warmup=5, worker_counts=(4,))
    assert result.interrupted and result.run_dirs and Path(result.run_dirs).is_dir()
    assert sum(len(k.trials) for k in result.knobs) >= 1
    import shutil

    shutil.rmtree(result.run_dirs)


def test_a_script_waiting_for_data_gets_its_loader_tuned_before_the_precision(monkeypatch: pytest.MonkeyPatch) -> None:
    # as written, 4 workers feed 1,300 samples/s; 16 workers 4,000; bf16 speeds only the GPU's part
    specs: list[str] = []

    def measure(command, knobs, run_dir, *, steps, warmup, knob, setting, params, **kw):
        specs.append(knobs)
        run_dir.mkdir(parents=True)
        names = knobs.split(",") if knobs else []
        workers = next((int(n.split("=")[1]) for n in names if n.startswith("num_workers=")), 4)
        feed = 325.0 * workers
        gpu = 4000.0 * (1.6 if "bf16" in names else 1.0)
        rate = min(feed, gpu) * (1 + 0.002 * (len(specs) % 3))
        step_ms = 256e3 / rate
        wait = max(0.0, step_ms - 256e3 / gpu)
        return Trial(knob=knob, setting=setting, params=params, verdict=TrialVerdict.OK, steps=warmup + steps,
                     samples_per_s=rate, step_ms=step_ms, data_wait_ms=wait, wall_s=1.0)

    monkeypatch.setattr(script, "measure", measure)
    monkeypatch.setattr(script, "_cuda", lambda: True)
    said: list[str] = []
    result = script.tune_script(["all"], ("python", "train.py"), steps=10, warmup=5, worker_counts=(4, 16),
                                on_say=said.append)
    stages = [k.knob for k in result.knobs]
    assert stages.index("script:loader") < stages.index("script:precision")
    assert any("the loader is tuned first" in line for line in said)
    # the precision runs use the loader the loader stage chose, not an untested one
    precision_specs = [s for s in specs if "bf16" in s.split(",")]
    assert precision_specs and all("num_workers=16" in s for s in precision_specs)
    assert "num_workers=16" in result.loader["try"] and "bf16" in result.loader["try"].split(",")
