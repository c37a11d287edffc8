"""Trial isolation and classification: a real ``torch.OutOfMemoryError`` does not break the next
trial (in this process or in a fresh one), and a trial that ran no steps is a failed trial."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.records.tune import TrialVerdict
from gpudoctor.tune.session import TuneContext, TuneOptions
from gpudoctor.tune.target import load_target
from gpudoctor.tune.trials import TrialRunner, run_in_subprocess

HERE = Path(__file__).parent
OOM_REF = f"{HERE / 'tiny_target.py'}:oom_target"


def _ctx(ref: str, isolation: str = "inline") -> TuneContext:
    import torch

    target = load_target(ref)
    runner = TrialRunner(target, ref, isolation=isolation)
    return TuneContext(target, runner, TuneOptions(steps=2, warmup=1, window_s=0.0), device=torch.device("cpu"))


def test_inline_oom_then_the_next_trial_runs() -> None:
    ctx = _ctx(OOM_REF)
    big = ctx.runner.run(ctx.spec("batch", "batch=200", {}, batch_size=200))
    assert big.verdict is TrialVerdict.OOM and "OutOfMemoryError" in big.reason
    small = ctx.runner.run(ctx.spec("batch", "batch=50", {}, batch_size=50))
    assert small.verdict is TrialVerdict.OK, small.reason
    assert small.steps == 3 and small.samples_per_s and small.step_ms
    assert small.loss is not None


def test_eval_probed_separately_fits_a_larger_batch() -> None:
    ctx = _ctx(OOM_REF)
    train = ctx.runner.run(ctx.spec("batch", "batch=150", {}, batch_size=150))
    evaluation = ctx.runner.run(ctx.spec("eval_batch", "eval=150", {}, mode="eval", batch_size=150))
    assert train.verdict is TrialVerdict.OOM
    assert evaluation.verdict is TrialVerdict.OK, evaluation.reason


def test_process_isolation_oom_then_ok() -> None:
    ctx = _ctx(OOM_REF)
    big = run_in_subprocess(OOM_REF, ctx.spec("batch", "batch=200", {}, batch_size=200), timeout_s=120)
    assert big.verdict is TrialVerdict.OOM
    small = run_in_subprocess(OOM_REF, ctx.spec("batch", "batch=50", {}, batch_size=50), timeout_s=120)
    assert small.verdict is TrialVerdict.OK and small.steps == 3


def test_a_trial_that_ran_no_steps_is_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lightning #13696: a finder whose trials silently did not run. Here the engine is made to
    return at once; the trial must not be counted as a fit."""
    from gpudoctor.train import loop

    real_fit = loop.Trainer.fit

    def lazy_fit(self, data, *, epochs=1, val_loader=None):
        cfg = self.config
        self.config = cfg.replace(max_steps=1)
        try:
            return real_fit(self, data, epochs=epochs)
        finally:
            self.config = cfg

    monkeypatch.setattr(loop.Trainer, "fit", lazy_fit)
    ctx = _ctx(OOM_REF)
    trial = ctx.runner.run(ctx.spec("batch", "batch=10", {}, batch_size=10))
    assert trial.verdict is TrialVerdict.FAILED and "did not really execute" in trial.reason


def test_non_finite_loss_is_rejected() -> None:
    import torch

    ctx = _ctx(OOM_REF)
    ctx.target = type(ctx.target)(
        model_factory=ctx.target.model_factory,
        optimizer_factory=lambda params: torch.optim.SGD(params, lr=1e30),
        loss_fn=lambda out, y: torch.nn.functional.cross_entropy(out, y) * float("inf"),
        train_dataset=ctx.target.train_dataset, config=ctx.target.config, loader=ctx.target.loader)
    ctx.runner.target = ctx.target
    trial = ctx.runner.run(ctx.spec("precision", "fp32", {}, batch_size=8))
    assert trial.verdict is TrialVerdict.REJECTED and "non-finite" in trial.reason


def test_loader_trial_compiles_before_the_loader_is_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    """With torch.compile on, a loader trial first runs two cached steps (the compile), then times the
    real loader from a clean record: the compile is not counted as the loader's time."""
    import dataclasses

    import gpudoctor.train.engine as engine
    import gpudoctor.train.loop as loop
    from gpudoctor.tune.target import LoaderSettings
    from gpudoctor.tune.trials import execute

    compiled: list[bool] = []
    monkeypatch.setattr(engine, "maybe_compile", lambda fn, perf: compiled.append(perf.compile) or fn)
    fed: list[str] = []
    real_fit = loop.Trainer.fit

    def fit(self, data, **kwargs):
        fed.append(type(data).__name__)
        return real_fit(self, data, **kwargs)

    monkeypatch.setattr(loop.Trainer, "fit", fit)
    ctx = _ctx(f"{HERE / 'tiny_target.py'}:target")
    config = ctx.target.config.replace(perf=dataclasses.replace(ctx.target.config.perf, compile=True))
    spec = ctx.spec("loader", "num_workers=0", {}, config=config, mode="loader", batch_size=16,
                    loader=LoaderSettings(num_workers=0), warmup=0, steps=4)
    trial = execute(ctx.target, spec, ctx.runner.pools())
    assert trial.verdict is TrialVerdict.OK, trial.reason
    assert compiled == [True] and fed == ["_Cycle", "DataLoader"]
    assert trial.steps == 4  # the two compile steps are not in the trial's record


def test_loader_trial_without_compile_runs_the_loader_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpudoctor.train.loop as loop
    from gpudoctor.tune.target import LoaderSettings
    from gpudoctor.tune.trials import execute

    fed: list[str] = []
    real_fit = loop.Trainer.fit
    monkeypatch.setattr(loop.Trainer, "fit", lambda self, data, **kw: fed.append(type(data).__name__) or
                        real_fit(self, data, **kw))
    ctx = _ctx(f"{HERE / 'tiny_target.py'}:target")
    spec = ctx.spec("loader", "num_workers=0", {}, mode="loader", batch_size=16,
                    loader=LoaderSettings(num_workers=0), warmup=0, steps=4)
    trial = execute(ctx.target, spec, ctx.runner.pools())
    assert trial.verdict is TrialVerdict.OK and fed == ["DataLoader"] and trial.steps == 4
