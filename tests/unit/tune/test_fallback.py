"""When the tuned whole loses its confirmation, the longest part of it the trials justify is
confirmed against the start (the same interleaved way) and written when it wins beyond the noise;
never something slower than the start, and only with the budget's time left.

The ResNet-50 run on an H200 this reproduces (benchmarks/results/tune-bars-resnet50-h200-run4.json):
the loader stage (through the real DataLoader) won 1.39x, precision (fp16) and batch (1024) won on
the device, and the whole measured 0.81x the start as training ran it: nothing was written. Here the
three stages are faked (each runs one real trial, through the loader or with the data on the
device, and changes one setting) and the confirmation's rates are known figures (conftest.py)."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from gpudoctor.records.tune import KnobResult, Trial, TrialVerdict, TuneResult
from gpudoctor.report.tune_view import render_tune
from gpudoctor.train import TrainConfig
from gpudoctor.tune import batch, loader, precision, session
from gpudoctor.tune.confirm import KEPT, NEXT, Step, decide, fallbacks
from gpudoctor.tune.session import TuneOptions, tune
from gpudoctor.tune.target import LoaderSettings

HERE = Path(__file__).parent
REF = f"{HERE / 'tiny_target.py'}:target"
FAST = TuneOptions(steps=2, warmup=1, window_s=0.0, repeats=2, budget_s=600.0)
START_BATCH = 16
PER_SAMPLE = 100.0  # conftest.py: a trial runs 100 x batch samples/s


def _stage(name: str, mode: str, change: Callable[[session.TuneContext], None]) -> Callable[..., KnobResult]:
    """A stage that runs one real trial (``mode``: through the loader or the data on the device)
    and then changes one setting, as a stage that found a winner does."""

    def run(ctx: session.TuneContext) -> KnobResult:
        ctx.run(ctx.spec(name, f"{name} trial", {}, mode=mode))
        change(ctx)
        return KnobResult(knob=name, summary=f"{name} changed")

    return run


@pytest.fixture
def resnet_like(monkeypatch: pytest.MonkeyPatch, fake_rates: Callable[..., list]) -> Callable[..., list]:
    """The run-4 shape: the starting loader feeds half of the GPU's rate (the loader stage runs
    first), loader (through the loader), precision and batch (data on the device) each change a
    setting. ``install(whole, part)``: the confirmation's tuned runs at ``whole`` x the start, the
    fallback's at ``part`` x. Returns the specs run."""

    def install(whole: float, part: float) -> list:
        specs = fake_rates(tuned_factor=whole)
        faked = session.TrialRunner.run

        def run(self, spec):
            trial = faked(self, spec)
            if trial.verdict is not TrialVerdict.OK:
                return trial
            if spec.knob == "plan" and spec.mode == "loader":  # the starting loader: half the GPU's rate
                return dataclasses.replace(trial, samples_per_s=trial.samples_per_s / 2)
            if spec.knob == "fallback":
                rate = PER_SAMPLE * START_BATCH * (part if spec.setting.startswith("fallback") else 1.0)
                return dataclasses.replace(trial, samples_per_s=rate, step_ms=1e3 * spec.batch_size / rate)
            return trial

        monkeypatch.setattr(session.TrialRunner, "run", run)
        monkeypatch.setattr(loader, "tune_loader", _stage(
            "loader", "loader", lambda ctx: setattr(ctx, "loader", ctx.loader.replace(eval_batch_size=64))))
        monkeypatch.setattr(precision, "tune_precision", _stage(
            "precision", "train", lambda ctx: setattr(ctx, "config", ctx.config.replace(
                perf=dataclasses.replace(ctx.config.perf, cudnn_benchmark=not ctx.config.perf.cudnn_benchmark)))))
        monkeypatch.setattr(batch, "tune_batch", _stage(
            "batch", "train", lambda ctx: setattr(ctx, "config", ctx.config.replace(batch_size=64))))
        return specs

    return install


def _knobs(result: TuneResult, name: str) -> list[KnobResult]:
    return [k for k in result.knobs if k.knob == name]


def test_a_part_that_wins_is_written_when_the_whole_loses(tmp_path: Path, resnet_like: Callable[..., list]) -> None:
    resnet_like(whole=0.81, part=1.17)
    said: list[str] = []
    out = tmp_path / "tuned.toml"
    result = tune(["precision", "batch", "loader"], target_ref=REF, options=FAST, out=out, on_say=said.append)
    assert [k.knob for k in result.knobs[1:4]] == ["loader", "precision", "batch"]  # loader-bound order
    confirm = _knobs(result, "confirm")[0]
    assert "0.81x" in confirm.summary and confirm.summary.endswith(NEXT), confirm.summary
    [fallback] = _knobs(result, "fallback")
    assert "fallback 1,872 vs starting 1,600 samples/s, 1.17x round by round" in fallback.summary
    assert fallback.summary.endswith(": written")
    assert [t.setting for t in fallback.trials] == ["starting configuration (batch 16)",
                                                     "fallback configuration (batch 16)"]
    assert all(len(t.rates) == 3 for t in fallback.trials)  # the same interleaved rounds as the confirmation
    assert fallback.notes[0].startswith("kept: loader (the stages as they ran, up to loader")
    dropped = [n for n in fallback.notes if n.startswith("dropped")]
    assert dropped == ["dropped precision, batch: measured with the data on the device, while the loader feeds 800 "
                       "of the 1,600 samples/s the GPU takes (50%): a gain there cannot reach training"], dropped
    # written: the loader stage's setting, not precision's or batch's
    assert not result.kept_start and result.config_path is not None
    written = TrainConfig.from_file(result.config_path)
    assert written.batch_size == START_BATCH and result.config["batch_size"] == START_BATCH
    assert written.perf.cudnn_benchmark == TrainConfig.from_dict(result.config).perf.cudnn_benchmark
    assert LoaderSettings.from_file(result.loader_path).eval_batch_size == 64
    assert any(line.startswith("fallback: confirming loader only (less precision, batch)") for line in said), said
    assert said[-1] == f"fallback: {fallback.summary}"


def test_a_fallback_that_also_loses_keeps_the_start(tmp_path: Path, resnet_like: Callable[..., list]) -> None:
    resnet_like(whole=0.81, part=0.95)
    out = tmp_path / "tuned.toml"
    result = tune(["precision", "batch", "loader"], target_ref=REF, options=FAST, out=out)
    [fallback] = _knobs(result, "fallback")  # input-bound: loader only; no shorter part is left
    assert "0.95x" in fallback.summary and fallback.summary.endswith(KEPT), fallback.summary
    assert fallback.winner == "starting configuration (batch 16)"
    assert result.kept_start and result.config_path is None and not out.exists()
    assert result.config["batch_size"] == START_BATCH and result.loader["eval_batch_size"] is None


def test_no_fallback_when_no_time_remains(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          resnet_like: Callable[..., list]) -> None:
    specs = resnet_like(whole=0.81, part=1.17)
    real = session.TuneContext.elapsed

    def elapsed(self) -> float:  # from the confirmation on: the budget is spent (it never stops for it)
        return real(self) + (FAST.budget_s if any(s.knob == "confirm" for s in specs) else 0.0)

    monkeypatch.setattr(session.TuneContext, "elapsed", elapsed)
    out = tmp_path / "tuned.toml"
    result = tune(["precision", "batch", "loader"], target_ref=REF, options=FAST, out=out)
    [fallback] = _knobs(result, "fallback")
    assert not fallback.trials and not any(s.knob == "fallback" for s in specs)  # nothing ran
    assert fallback.summary.startswith("not run: confirming the tuned configuration less precision, batch needs ~")
    assert "0 s of the budget was left" in fallback.summary and "raise --budget-s" in fallback.summary
    assert result.kept_start and result.config_path is None and not out.exists()


def test_a_whole_that_wins_runs_no_fallback(resnet_like: Callable[..., list]) -> None:
    specs = resnet_like(whole=2.0, part=1.17)
    result = tune(["precision", "batch", "loader"], target_ref=REF, options=FAST, out=None)
    assert not _knobs(result, "fallback") and not any(s.knob == "fallback" for s in specs)
    assert result.config["batch_size"] == 64 and not result.kept_start


def test_one_changed_stage_has_no_part_but_the_start(fake_rates: Callable[..., list]) -> None:
    fake_rates(tuned_factor=0.5)
    result = tune(["batch"], target_ref=REF, options=FAST, out=None)
    assert not _knobs(result, "fallback") and _knobs(result, "confirm")[0].summary.endswith(KEPT)


# -- which parts, pure


def _steps(*spec: tuple[str, bool]) -> list[Step]:
    return [Step(name=n, config=TrainConfig(batch_size=16 * (i + 1)), loader=LoaderSettings(), fed=fed)
            for i, (n, fed) in enumerate(spec)]


def test_parts_drop_the_last_stages_one_at_a_time_when_the_loader_keeps_up() -> None:
    steps = _steps(("precision", False), ("batch", False), ("loader", True), ("scaler", False))
    parts = fallbacks(steps, None, None)
    assert [[s.name for s in p.kept] for p in parts] == [["precision", "batch", "loader"], ["precision", "batch"],
                                                          ["precision"]]
    assert [n for n, _ in parts[1].dropped] == ["loader", "scaler"]
    assert all("a configuration with it lost its confirmation" in why for p in parts for _, why in p.dropped)
    assert parts[1].kept[-1].config.batch_size == 32  # the configuration the batch stage left


def test_an_input_bound_run_keeps_only_the_stages_measured_through_the_loader() -> None:
    steps = _steps(("loader", True), ("precision", False), ("batch", True), ("scaler", False))
    [part] = fallbacks(steps, 5_754.0, 8_438.0)
    assert [s.name for s in part.kept] == ["loader"]
    reasons = dict(part.dropped)
    assert "measured with the data on the device" in reasons["precision"]
    assert "feeds 5,754 of the 8,438 samples/s the GPU takes (68%)" in reasons["precision"]
    # batch was measured through the loader: not that reason; one line per reason
    assert reasons["batch"].startswith("ran after the stages kept, and a configuration with it lost")
    assert part.lines()[1:] == (f"dropped precision, scaler: {reasons['precision']}",
                                f"dropped batch: {reasons['batch']}")


def test_no_parts_when_the_first_stage_was_measured_on_the_device_of_an_input_bound_run() -> None:
    assert fallbacks(_steps(("precision", False), ("loader", True)), 800.0, 1_600.0) == []
    assert fallbacks(_steps(("loader", True)), None, None) == []


# -- the report


def _fallback_result() -> TuneResult:
    """The confirmation's rows are run 4's measured figures (the whole lost, 0.81x); the fallback's
    rows are made up for the rendering (no H200 run has measured a fallback yet). The summaries and
    notes are the ones the session writes (``confirm.decide``, ``Fallback.lines``)."""

    def row(knob: str, setting: str, rates: tuple[float, float, float], batch_size: int) -> Trial:
        median = sorted(rates)[1]
        return Trial(knob=knob, setting=f"{setting} (batch {batch_size})", params={}, verdict=TrialVerdict.OK,
                     steps=106, samples_per_s=median, step_ms=1e3 * batch_size / median, rates=rates,
                     spread=(max(rates) - min(rates)) / median)

    start = row("confirm", "starting configuration", (4_584.0, 4_927.0, 5_353.0), 256)
    tuned = row("confirm", "tuned configuration", (4_455.0, 3_968.0, 4_186.0), 1024)
    _, why = decide(start, tuned, 0.03, lost=NEXT)
    confirm = KnobResult(knob="confirm", trials=(start, tuned), winner=start.setting, summary=why)
    steps = _steps(("loader", True), ("precision", False), ("batch", False), ("scaler", False))
    [part] = fallbacks(steps, 5_754.0, 8_438.0)
    f_start = row("fallback", "starting configuration", (4_702.0, 4_951.0, 5_120.0), 256)
    f_part = row("fallback", "fallback configuration", (5_690.0, 5_760.0, 5_802.0), 256)
    write, why = decide(f_start, f_part, 0.03, name="fallback")
    assert write
    fallback = KnobResult(knob="fallback", trials=(f_start, f_part), winner=f_part.setting, summary=why,
                          notes=part.lines())
    return TuneResult(target="bench.tune:target", device="cuda:0 (NVIDIA H200)", knobs=(confirm, fallback),
                      config={"batch_size": 256}, loader={}, elapsed_s=496.0, config_path="tuned.toml",
                      loader_path="tuned.loader.toml")


@pytest.mark.parametrize("width", [80, 120])
def test_fallback_golden(golden, width: int) -> None:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None).print(render_tune(_fallback_result()))
    text = buf.getvalue()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= width
    golden(f"tune/tune_view_fallback_{width}.txt", text)
