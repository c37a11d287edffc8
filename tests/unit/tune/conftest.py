"""The tune tests' clock: trials run for real (real steps, real OOMs classified by type, real
verdicts), but the throughput they report is a fixed model, so every "beyond the noise" decision a
test asserts on is made on known figures, never on a shared CI machine's load (on a busy 2-core box
the run-to-run noise of the real figures reached +-1277% to +-2613%: any pick asserted on them is a
coin toss)."""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Iterator

import pytest

from gpudoctor.records.tune import TrialVerdict
from gpudoctor.tune import session

START_BATCH = 16  # tiny_target's configured batch
PER_SAMPLE = 100.0  # samples/s per sample of batch: throughput grows with the batch, so the search moves up


@pytest.fixture(autouse=True)
def _collect_only_what_the_test_made() -> Iterator[None]:
    """Every in-process trial ends with ``gc.collect()`` (``core/memory.py``: a failed step's frames
    hold its activations until collected). In this process that full collection walks every object
    pytest and the suite's imports made, ~0.3 s a trial here and more late in a full run: most of a
    tune test's time. ``gc.freeze()`` moves what existed before the test to the permanent generation,
    so each collection walks what the test (its trials, their tracebacks) made: the same objects are
    collected. ``gc.unfreeze()`` hands the rest (garbage from before the test included) back to the
    collector after the test."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.fixture
def fake_rates(monkeypatch: pytest.MonkeyPatch) -> Callable[..., list]:
    """``fake_rates(tuned_factor=2.0)`` makes every trial that ran report ``100 x batch`` samples/s
    (the same each run: no spread) and the confirmation's tuned runs ``tuned_factor`` times the
    starting ones; a tuple gives the tuned runs' factor round by round (``(1.2, 1.2, 27.0)``: one
    disturbed round, the noise of a busy machine). Returns the specs run, in order."""

    def install(tuned_factor: float | tuple[float, ...] = 2.0) -> list:
        factors = tuned_factor if isinstance(tuned_factor, tuple) else (tuned_factor,)
        real_run = session.TrialRunner.run
        specs: list = []

        def run(self, spec):
            specs.append(spec)
            trial = real_run(self, spec)
            if trial.verdict is not TrialVerdict.OK:
                return trial
            rate = PER_SAMPLE * spec.batch_size
            if spec.knob == "confirm":
                rate = PER_SAMPLE * START_BATCH
                if spec.setting.startswith("tuned"):
                    tuned_runs = sum(1 for s in specs if s.knob == "confirm" and s.setting.startswith("tuned"))
                    rate *= factors[(tuned_runs - 1) % len(factors)]
            return dataclasses.replace(trial, samples_per_s=rate, step_ms=1e3 * spec.batch_size / rate)

        monkeypatch.setattr(session.TrialRunner, "run", run)
        return specs

    return install
