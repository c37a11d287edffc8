"""One-off slow steps (analysis.one_off): a late start-up cost left out of the steady figures and
reported on its own; recurring stalls and short runs keep theirs."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.analysis.diagnose import diagnose
from gpudoctor.analysis.facts import run_facts
from gpudoctor.analysis.run_stats import run_stats
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Severity
from gpudoctor.records.rundir import load_run

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "runs_corpus"
# dcgan in shape: 16-step epochs of 64 samples whose last batch holds 40; each epoch's first two
# steps stall (workers restarted and checkpoints, then an image dump); the first 40-sample batch
# is autotuned once by cudnn.benchmark (1.2 s)
EPOCH = 16


def _dcgan_ms(i: int) -> float:
    if i == 15:
        return 1200.0
    return 180.0 if i % EPOCH in (0, 1) and i >= EPOCH else 20.0


def _dcgan_run(build, *, n: int = 60, step_ms=_dcgan_ms):
    loader = build.loader(num_workers=2, persistent_workers=False, dataset_len=1000, batch_size=64,
                          drop_last=False)
    return build.run(
        steps_by_rank={0: build.steps(n=n, step_ms=step_ms,
                                      samples=lambda i: 40 if i % EPOCH == EPOCH - 1 else 64,
                                      data_wait_ms=lambda i: 90.0 if i % EPOCH == 0 and i >= EPOCH else 1.0)},
        configs={0: build.config(loaders=(loader,), cudnn_benchmark=True)},
        windows={0: build.window(first_step=55, last_step=59, gpu_busy_frac=0.1)})


def test_a_one_off_new_shape_step_is_left_out_and_named(build):
    run = _dcgan_run(build)
    stats = run_facts(run, Thresholds()).ranks[0].stats
    one = stats.one_off
    assert one is not None and one.steps == (15,) and one.new_shape
    # steady: steps 6-54 (49) without step 15; the epoch stalls stay in the figures
    assert stats.n_used == 48
    assert stats.mean_step_ms == pytest.approx((42 * 20.0 + 6 * 180.0) / 48)
    assert stats.tail is not None and stats.tail.slow_steps == (16, 17, 32, 33, 48, 49)
    view = run_stats(run)[0]
    assert view.one_off_steps == (15,) and view.one_off_ms == 1200.0
    assert view.one_off.startswith("rank 0: one-time: step 15, 1.2 s (median step 20.0 ms)")
    assert "a batch of 40 samples, not 64" in view.one_off and "cudnn.benchmark" in view.one_off
    assert "drop_last=True" in view.one_off
    # the stall is still the verdict, with its period, and its cost no longer counts step 15
    f = diagnose(run)[0]
    assert f.code == "GD-RUN-PERIODIC-STALL" and "every ~16 steps" in f.title
    assert f.expected_gain == pytest.approx(6 * 160.0 / (42 * 20.0 + 6 * 180.0), abs=1e-4)


def test_a_periodic_stall_without_a_one_off_keeps_every_stall(build):
    # the same epochs without the autotuning step: every slow step recurs
    run = _dcgan_run(build, step_ms=lambda i: 180.0 if i % EPOCH in (0, 1) and i >= EPOCH else 20.0)
    stats = run_facts(run, Thresholds()).ranks[0].stats
    assert stats.one_off is None and stats.n_used == 49
    # a long stall that comes back (every 16 steps, far above the others) is not a one-off either
    big = lambda i: 1200.0 if i % EPOCH == EPOCH - 1 else 20.0  # noqa: E731
    stats = run_facts(_dcgan_run(build, step_ms=big), Thresholds()).ranks[0].stats
    assert stats.one_off is None and stats.tail.slow_steps == (15, 31, 47)


def test_a_single_slow_step_alone_is_a_one_off_only_when_it_matters(build):
    run = build.run(steps_by_rank={0: build.steps(n=60, step_ms=lambda i: 500.0 if i == 30 else 40.0)})
    stats = run_facts(run, Thresholds()).ranks[0].stats
    assert stats.one_off is not None and stats.one_off.steps == (30,) and not stats.one_off.new_shape
    assert stats.mean_step_ms == 40.0
    assert run_stats(run)[0].one_off.endswith("— left out of the steady figures")
    # 3x the median: under oneoff_factor x the median, kept (jitter-sized)
    run = build.run(steps_by_rank={0: build.steps(n=60, step_ms=lambda i: 120.0 if i == 30 else 40.0)})
    assert run_facts(run, Thresholds()).ranks[0].stats.one_off is None


def test_a_short_run_keeps_its_slow_step(build):
    # 20 steps: 14 steady steps cannot show that the slow one does not recur
    run = build.run(steps_by_rank={0: build.steps(n=20, step_ms=lambda i: 1200.0 if i == 15 else 20.0)},
                    windows={0: build.window(first_step=17, last_step=19)})
    stats = run_facts(run, Thresholds()).ranks[0].stats
    assert stats.one_off is None and stats.mean_step_ms > 100.0


def test_the_recorded_dcgan_run_leaves_out_its_autotuning_step_and_names_every_boundary_cost():
    run = load_run(CORPUS / "dcgan")
    stats = run_facts(run, Thresholds()).ranks[0].stats
    assert stats.one_off is not None and stats.one_off.steps == (15,)
    assert stats.one_off.samples == (40,) and stats.one_off.typical_samples == 64
    findings = diagnose(run)
    top = [f for f in findings if f.severity is not Severity.INFO][0]
    assert top.code == "GD-RUN-PERIODIC-STALL" and "every ~16 steps" in top.title
    boundary = top.evidence[-1]
    # the records' parts of the boundary: restarted workers' data wait, the image dump's syncs,
    # the rest of the host work (checkpoints, PNG writes)
    assert "waiting for the first batch (the DataLoader's 2 workers restart each epoch)" in boundary
    assert "blocked in 2 more host sync(s)" in boundary and "of other host work" in boundary
    assert "persistent_workers=True" in top.fix and "every N epochs" in top.fix


def test_the_recorded_siamese_run_is_not_a_slow_down():
    # 1.1 s of host-bound steps that rose from 18 to 26 ms and fell back (R^2 0.65): the host's
    # drift, not a slow-down tied to the step
    findings = diagnose(load_run(CORPUS / "siamese_network"))
    assert "GD-RUN-SLOWDOWN" not in {f.code for f in findings}
    assert findings[0].code == "GD-RUN-LAUNCH-BOUND"
