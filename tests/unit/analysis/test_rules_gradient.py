"""Gradient norm rules (exploding, non-finite, zero) on hand-built runs."""

from __future__ import annotations

from gpudoctor.analysis.diagnose import diagnose
from gpudoctor.records.finding import Severity

EXPLODING = "GD-RUN-GRAD-EXPLODING"
ZERO = "GD-RUN-GRAD-ZERO"


def by_code(findings):
    return {f.code: f for f in findings}


def run_with(build, norm, **kw):
    return build.run(steps_by_rank={0: build.steps(n=40, grad_norm=norm, **kw)})


def test_growing_norm_is_exploding(build):
    f = by_code(diagnose(run_with(build, lambda i: 1.0 * 1.15 ** i)))[EXPLODING]
    assert f.severity is Severity.WARN and f.expected_gain is None
    # steady steps 5-9 and 15-39 (profiler window 10-14 left out): 30 norms, quarters of 7
    head, tail = 1.15 ** 8, 1.15 ** 36
    assert f.title == f"Gradient norm grows {tail / head:.0f}x over the run: training is diverging"
    assert f.evidence[0].startswith(f"rank 0: global gradient norm (clip_grad_norm_) median {head:.4g} ")
    assert "clip_grad_norm_(model.parameters(), max_norm=1.0)" in f.fix


def test_nonfinite_norm_is_an_error(build):
    f = by_code(diagnose(run_with(build, lambda i: float("inf") if i >= 3 else 2.0)))[EXPLODING]
    assert f.severity is Severity.ERROR
    assert f.title == "Gradient norm NaN/inf from step 3: the run diverged"
    assert f.evidence == ("rank 0: clip_grad_norm_ returned a NaN/inf norm on 37 step(s), first at step 3",)
    nan = by_code(diagnose(run_with(build, lambda i: float("nan") if i == 30 else 2.0)))[EXPLODING]
    assert nan.evidence[1] == "the last finite norm before it: 2"


def test_steps_the_scaler_skipped_do_not_count(build):
    """An inf norm on a step the GradScaler skipped is the scaler doing its job."""
    run = run_with(build, lambda i: float("inf") if i % 7 == 0 else 2.0,
                   scaler_skipped=lambda i: i % 7 == 0)
    assert EXPLODING not in by_code(diagnose(run))


def test_healthy_norms_are_silent(build):
    # a norm that falls as the loss falls, with a spike on one batch
    run = run_with(build, lambda i: 50.0 if i == 25 else 5.0 / (1 + 0.1 * i))
    assert not {EXPLODING, ZERO} & set(by_code(diagnose(run)))
    assert not {EXPLODING, ZERO} & set(by_code(diagnose(run_with(build, None))))  # no clipping


def test_zero_norm(build):
    f = by_code(diagnose(run_with(build, 0.0)))[ZERO]
    assert f.severity is Severity.WARN
    assert f.evidence == ("rank 0: clip_grad_norm_ returned 0 on all 30 steady steps (steps 5-39)",)
    assert ZERO not in by_code(diagnose(run_with(build, lambda i: 0.0 if i < 30 else 1e-3)))
