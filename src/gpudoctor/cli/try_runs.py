"""The ``--try`` measurement shared by ``gpudoctor run --try`` and ``doctor``: interleaved runs of
the baseline and of the knobbed command, repeated until the difference is outside the run-to-run
noise (:mod:`gpudoctor.analysis.try_compare`), at most ``max_runs`` of each.

The first pair is the diagnosed pair (``OUT/baseline``, ``OUT/try``, with the profiler window
and the GPU samplers as asked); the repeats (``OUT/baseline-2``, ``OUT/try-2``, ...) run the
probes alone, the same way for both arms. Every run stops after the same number of steps and is
judged on its steady steps (warm-up and profiler window left out).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpudoctor.collectors.knobs import SLOW_WARMUP_KNOBS, Knob

# Steps per run when a knob compiles (``compile``) and --steps was not given: compilation takes
# the first steps (the first runs eagerly, the second compiles forward and backward), and the
# steady statistics drop max(5, 10%) of the steps; 100 steps keep 90 steady steps after it.
SLOW_WARMUP_STEPS = 100


def stall_for(names: tuple[str, ...], stall_timeout_s: float) -> float:
    """The stall limit of a run that tries ``names``: at least ``SLOW_WARMUP_STALL_S`` when one of
    them compiles (its first steps recompile), else ``stall_timeout_s``."""
    from gpudoctor.collectors.knobs import SLOW_WARMUP_STALL_S

    return max(stall_timeout_s, SLOW_WARMUP_STALL_S) if set(names) & set(SLOW_WARMUP_KNOBS) else stall_timeout_s


def steps_for(knobs: tuple[Knob, ...], steps: int | None, default: int) -> tuple[int, str]:
    """The steps each run takes, and a note when a knob needs more than the default."""
    if steps is not None:
        return steps, ""
    slow = [k.name for k in knobs if k.name in SLOW_WARMUP_KNOBS]
    if slow and default < SLOW_WARMUP_STEPS:
        return SLOW_WARMUP_STEPS, (f"{', '.join(slow)}: {SLOW_WARMUP_STEPS} steps per run (not {default}) "
                                   "so that compilation falls in the warm-up the comparison leaves out")
    return default, ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class TryRuns:
    """Every run of a ``--try``: outcomes and loaded run data per arm, in run order."""

    baseline: list[tuple[Any, Any]]  # (RunOutcome, RunData)
    tried: list[tuple[Any, Any]]
    comparison: Any  # TryComparison, or None when no run with knobs finished

    @property
    def exit_code(self) -> int:
        """The first failing run's exit code (130 after Ctrl-C), else 0."""
        failed = [o.exit_code for o, _ in self.baseline + self.tried if o.exit_code != 0]
        return failed[0] if failed else 0


def measure(make_spec: Callable[..., Any], base: Path, knobs: tuple[Knob, ...], *, max_runs: int,
            first: tuple[Any, Any] | None = None, on_run: Callable[[str, int], None] | None = None,
            run: Callable[[Any], tuple[Any, Any]]) -> TryRuns:
    """Run the arms interleaved until the judgement is outside the noise or ``max_runs`` each.

    Args:
        make_spec: ``make_spec(run_dir, knobs=..., repeat=bool)`` -> a ``RunSpec``.
        first: an already finished baseline run (``doctor``'s diagnosed run), if any.
        on_run: told ``(arm, n)`` before each run (progress).
        run: runs one spec; returns ``(RunOutcome, RunData)``.
    """
    from gpudoctor.analysis.try_compare import compare, needs_more

    on_run = on_run or (lambda arm, n: None)
    baseline: list[tuple[Any, Any]] = [first] if first is not None else []
    tried: list[tuple[Any, Any]] = []
    comparison = None
    while True:
        n = len(tried) + 1
        suffix = "" if n == 1 else f"-{n}"
        if len(baseline) < n:
            on_run("baseline", n)
            outcome, data = run(make_spec(base / f"baseline{suffix}", knobs=(), repeat=n > 1))
            baseline.append((outcome, data))
            if outcome.exit_code != 0 or not data.steps:
                break
        on_run("try", n)
        outcome, data = run(make_spec(base / f"try{suffix}", knobs=knobs, repeat=n > 1))
        tried.append((outcome, data))
        comparison = compare([d for _, d in baseline], [d for _, d in tried])
        if outcome.exit_code != 0 or not data.steps or comparison.judgement is None:
            break
        if not needs_more(comparison.judgement, max_runs=max_runs):
            break
    return TryRuns(baseline=baseline, tried=tried, comparison=comparison)
