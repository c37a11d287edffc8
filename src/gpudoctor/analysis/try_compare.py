"""``--try``: is the knobbed run faster than the baseline by more than the run-to-run noise?

How often the rule errs, from ``tools/try_rule_sim.py`` (normal run-to-run noise of standard
deviation sigma, at most 4 runs of each): with no real effect it calls a knob "faster" in 0.8%
of tries at sigma 1% and 4.6% at sigma 5%; it finds a real +10% in 91% of tries at sigma 2%
(2.2 runs of each on average), a +5% in 48%, and a +40% at sigma 3% always, in 2 runs of each.

Pure: throughputs (or run records) in, a judgement out. Each run's throughput is the steady-state
figure of :func:`gpudoctor.analysis.run_stats.run_stats` (warm-up and the profiler window left
out; summed over ranks), so the table quotes the same number as the run summary.

The rule, for runs interleaved baseline, try, baseline, try, ...:

* gain = median(try) / median(baseline) - 1;
* noise = the run-to-run spread: the larger of the two arms' relative range
  (max - min) / median between repeats of the *same* setting;
* the difference is outside the noise when the gap between the two arms' ranges (the slowest
  try run against the fastest baseline run, for a gain; the other way round for a loss),
  relative to the baseline's median, is larger than the noise: the arms are further apart than
  runs of one setting are among themselves. That needs at least :data:`MIN_RUNS` runs of each;
* more pairs run until it is outside the noise, or the cap is reached (then it is "within the
  noise");
* only a gain outside the noise and at least :data:`MIN_GAIN` is "faster"; a knob that measured
  slower, or within the noise, or too little, is not recommended here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpudoctor.analysis.run_stats import StepStats, run_stats
from gpudoctor.analysis.steps import median
from gpudoctor.records.rundir import RunData

MIN_RUNS = 2  # per arm: one run has no spread, so nothing can be said about the noise
DEFAULT_MAX_RUNS = 4  # per arm: 8 runs at most; a gain that 4 + 4 runs cannot separate is noise
# Below 2% a change is not worth an edit: runs of one setting on one machine drift by about that
# much between minutes (clocks, other tenants), more than their spread over seconds shows.
MIN_GAIN = 0.02

FASTER, SLOWER, NO_GAIN, WITHIN_NOISE, UNKNOWN = "faster", "slower", "no_gain", "within_noise", "unknown"
FINISHED = ("stopped", "completed")  # run statuses whose steps measure the setting

ROWS = (
    ("throughput", "throughput"),
    ("step_ms", "step time (ms, median)"),
    ("data_wait_ms", "data wait (ms/step, median)"),
    ("gpu_ms", "GPU time (ms/step, median)"),
    ("h2d_ms", "H2D copy issue (ms/step, median)"),
    ("host_syncs", "host syncs / step (median)"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Judgement:
    """The comparison of the two arms' throughputs (one figure per run, in run order)."""

    baseline: tuple[float, ...]
    tried: tuple[float, ...]
    gain: float | None  # median(tried) / median(baseline) - 1
    noise: float | None  # the larger arm's relative range between its own runs
    spread_baseline: float | None
    spread_try: float | None
    outside_noise: bool
    verdict: str  # FASTER | SLOWER | NO_GAIN | WITHIN_NOISE | UNKNOWN

    @property
    def recommended(self) -> bool:
        return self.verdict == FASTER


def _spread(values: Sequence[float]) -> float | None:
    mid = median(values)
    if len(values) < 2 or not mid:
        return None
    return (max(values) - min(values)) / mid


def judge(baseline: Sequence[float], tried: Sequence[float], *, min_gain: float = MIN_GAIN) -> Judgement:
    """Judge ``tried`` against ``baseline`` throughputs (higher is better)."""
    b_mid, t_mid = median(baseline), median(tried)
    gain = t_mid / b_mid - 1.0 if b_mid and t_mid is not None else None
    sb, st = _spread(baseline), _spread(tried)
    noise = max(sb, st) if sb is not None and st is not None else None
    outside = False
    if gain is not None and noise is not None and b_mid:
        gap = (min(tried) - max(baseline)) if gain > 0 else (min(baseline) - max(tried))
        outside = gap / b_mid > noise
    if gain is None:
        verdict = UNKNOWN
    elif not outside:
        verdict = WITHIN_NOISE
    elif gain < 0:
        verdict = SLOWER
    elif gain < min_gain:
        verdict = NO_GAIN
    else:
        verdict = FASTER
    return Judgement(baseline=tuple(baseline), tried=tuple(tried), gain=gain, noise=noise,
                     spread_baseline=sb, spread_try=st, outside_noise=outside, verdict=verdict)


def needs_more(judgement: Judgement, *, max_runs: int = DEFAULT_MAX_RUNS) -> bool:
    """Should another baseline/try pair run? Until both arms have :data:`MIN_RUNS`, then until the
    difference is outside the noise or either arm reaches ``max_runs``."""
    n = min(len(judgement.baseline), len(judgement.tried))
    if judgement.gain is None and n >= 1:
        return False  # a run without steady steps: repeating will not make it comparable
    if n < MIN_RUNS:
        return True
    return not judgement.outside_noise and n < max_runs


@dataclass(frozen=True, kw_only=True)
class TryComparison:
    """Before/after figures of a ``--try``. ``gain`` is the measured throughput change (0.25 = +25%).

    ``before``/``after`` hold, per row of :data:`ROWS`, the median over each arm's runs;
    ``judgement`` holds every run's throughput, the spread and the verdict; ``notes`` what the
    knobs did or why they did nothing (``knob_notes`` of the knobbed runs).
    """

    knobs: tuple[str, ...]
    unit: str
    before: dict[str, float | None]
    after: dict[str, float | None]
    gain: float | None
    judgement: Judgement | None = None
    notes: tuple[str, ...] = ()
    run_dirs: tuple[tuple[str, str], ...] = field(default=())  # (arm, directory) in run order
    failed: str = ""  # how a run with the knobs ended when it did not finish ("crashed", ...)


def _combine(stats: list[StepStats]) -> tuple[dict[str, float | None], str]:
    if not stats:
        return {key: None for key, _ in ROWS}, "steps/s"
    lead = stats[0]  # per-step figures from the first rank; throughput summed over ranks
    thr = [s.throughput for s in stats]
    out: dict[str, float | None] = {key: getattr(lead, key) for key, _ in ROWS if key != "throughput"}
    out["throughput"] = sum(thr) if all(t is not None for t in thr) else None  # type: ignore[arg-type]
    return out, lead.unit


def _arm(runs: Sequence[RunData]) -> tuple[dict[str, float | None], list[float], str]:
    figures = [_combine(run_stats(run)) for run in runs]
    units = {unit for _, unit in figures}
    unit = units.pop() if len(units) == 1 else "mixed"
    merged = {key: median([f[key] for f, _ in figures if f[key] is not None]) for key, _ in ROWS}
    thr = [f["throughput"] for f, _ in figures if f["throughput"] is not None]
    return merged, thr, unit  # type: ignore[return-value]


def compare(baseline: RunData | Sequence[RunData], tried: RunData | Sequence[RunData]) -> TryComparison:
    """Compare the baseline run(s) with the knobbed one(s); both in run order."""
    baselines = [baseline] if isinstance(baseline, RunData) else list(baseline)
    tries = [tried] if isinstance(tried, RunData) else list(tried)
    before, b_thr, unit = _arm(baselines)
    after, t_thr, unit_after = _arm(tries)
    judgement = None
    failed = next((r.manifest.status for r in tries if r.manifest.status not in FINISHED), "")
    if failed:
        after = {key: None for key, _ in ROWS}  # a run that broke off is no measure of the knob
    elif unit == unit_after and len(b_thr) == len(baselines) and len(t_thr) == len(tries) and b_thr and t_thr:
        judgement = judge(b_thr, t_thr)
    notes: list[str] = []
    for run in tries:
        for _, config in sorted(run.configs.items()):
            notes += [n for n in config.knob_notes if n not in notes]
    knobs = tuple(tries[0].manifest.knobs) if tries else ()
    dirs = []
    for pair in range(max(len(baselines), len(tries))):
        dirs += [("baseline", str(baselines[pair].path))] if pair < len(baselines) else []
        dirs += [("try", str(tries[pair].path))] if pair < len(tries) else []
    return TryComparison(knobs=knobs, unit=unit, before=before, after=after,
                         gain=judgement.gain if judgement is not None else None,
                         judgement=judgement, notes=tuple(notes), run_dirs=tuple(dirs), failed=failed)


__all__ = ["DEFAULT_MAX_RUNS", "MIN_GAIN", "MIN_RUNS", "ROWS", "Judgement", "TryComparison", "compare",
           "judge", "needs_more"]
