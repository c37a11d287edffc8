"""Compile trials that dynamo silently ran eager (issue 17): in-process trials share dynamo's cache
for the engine's compiled step; a factory that defines the model class per call recompiles every
trial and, past dynamo's recompile limit (8), runs eager without an error. The watch resets dynamo
when the model's types change (no silent eager) and rejects a trial in which dynamo still gave up.

The engine's ``torch.compile(fn, mode=...)`` is replaced by ``backend="eager"`` (dynamo alone: its
guards, cache and limit are the same, no code is generated), so the trials take a fraction of a
second each on a CPU."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from gpudoctor.records.tune import TrialVerdict
from gpudoctor.train import TrainConfig, engine
from gpudoctor.train.config import PerfConfig, PrecisionConfig
from gpudoctor.tune import compile_watch, trials
from gpudoctor.tune.session import TuneContext, TuneOptions
from gpudoctor.tune.target import LoaderSettings, TuneTarget


class ModuleLevel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def per_call() -> nn.Module:
    class PerCall(nn.Module):  # a new type at every call
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

    return PerCall()


@pytest.fixture(autouse=True)
def _fresh_dynamo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(engine, "maybe_compile",
                        lambda fn, config: torch.compile(fn, backend="eager") if config.compile else fn)
    monkeypatch.setattr(compile_watch, "_last_types", None)
    monkeypatch.setattr(compile_watch, "counts", dict.fromkeys(compile_watch.counts, 0))
    torch.compiler.reset()
    yield
    torch.compiler.reset()


def _graphs() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def _run(factory, settings: list[tuple[str, int]]) -> list[tuple[TrialVerdict, int, str]]:
    """One compile trial per ``(dtype, batch)``: its verdict, the graphs dynamo compiled in it, the reason."""
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(128, 8, generator=g), torch.randint(0, 3, (128,), generator=g))
    target = TuneTarget(model_factory=factory, optimizer_factory=lambda p: torch.optim.SGD(p, lr=0.01),
                        loss_fn=nn.CrossEntropyLoss(), train_dataset=data, config=TrainConfig(device="cpu"),
                        loader=LoaderSettings(num_workers=0))
    ctx = TuneContext(target, None, TuneOptions(budget_s=None), device=torch.device("cpu"))
    pools = {"train": trials.SamplePool(data)}
    out = []
    for dtype, batch in settings:
        config = target.config.replace(precision=PrecisionConfig(dtype=dtype), perf=PerfConfig(compile=True))
        before = _graphs()
        trial = trials.execute(target, ctx.spec("precision", f"{dtype} compile", {}, config=config, batch_size=batch,
                                                warmup=1, steps=2), pools)
        out.append((trial.verdict, _graphs() - before, trial.reason))
    return out


SETTINGS = [("fp32", 16), ("bf16", 16), ("fp32", 16)] * 3 + [("fp32", 24), ("fp32", 32), ("bf16", 40)]  # 12


def _unwatched(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trials as they ran before the watch."""
    def watch(model, *, compiling):
        return contextlib.nullcontext(compile_watch.Watch())

    off = type("Off", (), {"watch": staticmethod(watch)})
    monkeypatch.setattr(trials, "compile_watch", off)


def test_a_class_made_per_call_runs_eager_silently_without_the_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The premise, measured: past the 8th trial dynamo compiles nothing and the trial still says ok."""
    _unwatched(monkeypatch)
    rows = _run(per_call, SETTINGS)
    assert [graphs for _, graphs, _ in rows[:8]] == [1] * 8
    assert [graphs for _, graphs, _ in rows[8:]] == [0] * 4  # eager: no graph, yet ...
    assert all(verdict is TrialVerdict.OK for verdict, _, _ in rows)  # ... "ok"


def test_a_class_made_per_call_compiles_in_every_trial_with_the_watch() -> None:
    rows = _run(per_call, SETTINGS)
    assert [(verdict, graphs) for verdict, graphs, _ in rows] == [(TrialVerdict.OK, 1)] * len(SETTINGS)
    assert compile_watch.counts == {"compile_trials": 12, "type_resets": 11, "fell_back": 0}


def test_a_module_level_class_keeps_its_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    """No reset for a class defined once: the cache serves it as before (same graphs, none added)."""
    watched = _run(ModuleLevel, SETTINGS)
    assert compile_watch.counts["type_resets"] == 0
    torch.compiler.reset()
    _unwatched(monkeypatch)
    unwatched = _run(ModuleLevel, SETTINGS)
    assert [graphs for _, graphs, _ in watched] == [graphs for _, graphs, _ in unwatched]
    assert sum(graphs for _, graphs, _ in watched) <= 4  # fp32, bf16, then a dynamic batch: never near 8
    assert all(verdict is TrialVerdict.OK for verdict, _, _ in watched)


def _limit_name() -> str:
    import torch._dynamo.config as config

    return "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"


@pytest.mark.parametrize("silenced", [False, True], ids=["warning", "counter"])
def test_a_trial_dynamo_gave_up_on_is_rejected_and_the_next_compiles(silenced: bool) -> None:
    """The limit reached anyway (here: lowered to 1, a module-level class in a second dtype): the
    trial is rejected with the reason, found from dynamo's warning or, with its logger silenced
    (``TORCH_LOGS``), from its counter; the next trial starts from a reset cache and compiles."""
    import torch._dynamo.config as config

    logger = logging.getLogger("torch._dynamo.convert_frame")
    level = logger.level
    if silenced:
        logger.setLevel(logging.ERROR)
    try:
        with config.patch(**{_limit_name(): 1}):
            rows = _run(ModuleLevel, [("fp32", 16), ("bf16", 16), ("fp32", 16)])
    finally:
        logger.setLevel(level)
    (v1, g1, _), (v2, g2, why), (v3, g3, _) = rows
    assert (v1, g1) == (TrialVerdict.OK, 1)
    assert v2 is TrialVerdict.REJECTED and g2 == 0
    assert "ran this trial eager" in why and f"torch._dynamo.config.{_limit_name()}" in why and "after 1 graph " in why
    assert (v3, g3) == (TrialVerdict.OK, 1)
    assert compile_watch.counts["fell_back"] == 1


def test_the_reason_in_words() -> None:
    assert compile_watch.reason("recompile_limit", 8) == (
        "torch.compile stopped recompiling after 8 graphs (dynamo's recompile_limit) and ran this trial eager: "
        "define the model class at module level (a class made per call is a new type every trial) or raise "
        "torch._dynamo.config.recompile_limit")
    assert len(compile_watch.reason("accumulated_recompile_limit", 256)) < 300  # trials cut reasons at 300


def test_eager_trials_are_not_watched(monkeypatch: pytest.MonkeyPatch) -> None:
    """A trial without compile neither resets dynamo (a user's own compiled code keeps its cache) nor
    counts as a compile trial."""
    resets: list[int] = []
    monkeypatch.setattr(compile_watch, "_reset", lambda: resets.append(1))
    for _ in range(2):
        with compile_watch.watch(per_call(), compiling=False) as state:
            pass
    assert state.reason == "" and not state.reset and not resets and compile_watch.counts["compile_trials"] == 0


def test_a_compile_trial_run_eager_never_wins_and_the_notes_say_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """The precision knob's compile switch on a trial dynamo gave up on (the limit set to 0: every
    compile is over it): the row is rejected with the reason, the note repeats it, compile is not
    written. The switch runs only on a GPU, so the context says CUDA while the trials run on the CPU
    (the CUDA-only dtypes skipped)."""
    import torch._dynamo.config as config

    from gpudoctor.tune import precision
    from gpudoctor.tune.trials import TrialRunner

    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(128, 8, generator=g), torch.randint(0, 3, (128,), generator=g))
    target = TuneTarget(model_factory=ModuleLevel, optimizer_factory=lambda p: torch.optim.SGD(p, lr=0.01),
                        loss_fn=nn.CrossEntropyLoss(), train_dataset=data,
                        config=TrainConfig(device="cpu", batch_size=16, precision=PrecisionConfig(dtype="fp32")),
                        loader=LoaderSettings(num_workers=0))
    ctx = TuneContext(target, TrialRunner(target, "unused:target", isolation="inline"),
                      TuneOptions(budget_s=None, steps=2, warmup=1, window_s=0.0, repeats=1),
                      device=torch.device("cpu"))
    ctx.cuda = True
    monkeypatch.setattr(precision, "_cuda_only_reason", lambda ctx, dtype: None if dtype == "fp32" else "CPU test")
    with config.patch(**{_limit_name(): 0}):
        result = precision.tune_precision(ctx)
    row = next(t for t in result.trials if t.setting.endswith("compile=on"))
    assert row.verdict is TrialVerdict.REJECTED and "ran this trial eager" in row.reason
    assert any(n.startswith("compile=on: rejected: torch.compile stopped recompiling") for n in result.notes)
    assert result.params["perf.compile"] is False and "compile" not in result.winner
