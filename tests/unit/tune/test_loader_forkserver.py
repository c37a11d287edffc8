"""The loader knob's start-method trial (forkserver against the default) and the setting's round trip."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpudoctor.tune.target import LoaderSettings
from gpudoctor.tune.trials import make_loader

HERE = Path(__file__).parent
REF = f"{HERE / 'tiny_target.py'}:target"


def test_start_method_round_trips_and_reaches_the_dataloader(tmp_path: Path) -> None:
    settings = LoaderSettings(num_workers=1, multiprocessing_context="forkserver")
    settings.to_file(tmp_path / "loader.toml")
    assert LoaderSettings.from_file(tmp_path / "loader.toml") == settings
    assert "multiprocessing_context" not in (LoaderSettings().to_file(tmp_path / "d.toml") or
                                             (tmp_path / "d.toml").read_text())
    from gpudoctor.tune.target import load_target

    loader = make_loader(load_target(REF).train_dataset, 4, settings)
    assert loader.multiprocessing_context.get_start_method() == "forkserver"
    with pytest.raises(ValueError, match="use fork, spawn or forkserver"):
        LoaderSettings(multiprocessing_context="thread")


def test_loader_knob_tries_forkserver_workers(monkeypatch: pytest.MonkeyPatch, fake_rates: Callable[..., list]) -> None:
    """The forkserver trial runs for real (its worker really starts); its figures are fixed
    (conftest.py), so the pick between start methods is known (equal rates: the default, the
    cheaper one, stays) and the confirmation runs fork workers, not a fresh forkserver worker a
    round (one imports torch: seconds each on a shared 2-core box)."""
    import gpudoctor.tune.loader as loader_knob
    from gpudoctor.records.tune import TrialVerdict
    from gpudoctor.tune.session import TuneOptions, tune

    import dataclasses

    from gpudoctor.tune.target import load_target

    fake_rates(tuned_factor=2.0)
    monkeypatch.setattr(loader_knob, "worker_counts", lambda most: [1])  # one worker: a short sweep
    target = load_target(REF)  # starting at 1 worker: the sweep's pick has no cheaper count to be checked against
    target = dataclasses.replace(target, loader=target.loader.replace(num_workers=1))
    result = tune(["loader"], target_ref=REF, target=target,
                  options=TuneOptions(steps=2, warmup=1, window_s=0.0, budget_s=600.0), out=None)
    loader = next(k for k in result.knobs if k.knob == "loader")
    tried = [t for t in loader.trials if t.params.get("multiprocessing_context") == "forkserver"]
    assert tried and tried[0].verdict is TrialVerdict.OK, [(t.setting, t.reason) for t in loader.trials]
    assert all(t.verdict is TrialVerdict.OK and len(t.rates) == 2 for t in tried), [(t.setting, t.reason)
                                                                                    for t in tried]
    assert any(n.startswith("forkserver workers against") for n in loader.notes), loader.notes
    assert loader.params["multiprocessing_context"] is None  # no faster than fork: the default stays
