"""One-off slow steps: a step (or a few consecutive ones) after warm-up that does not recur in
the run and is far longer than anything that does, left out of the steady figures like the
warm-up and reported on its own.

pytorch/examples' dcgan on an H200 (``--dataset fake``: 1,000 images, so an epoch of 16 steps
whose last batch holds 40 samples) took 1,196 ms at step 15 against a 19.6 ms median: the first
40-sample batch, which ``cudnn.benchmark`` autotunes once (steps 31 and 47, the next 40-sample
batches, took 17-19 ms). Inside the 49 steady steps that one step added 24 ms to a 45 ms mean
and decided the A/B comparisons of the epoch-boundary fixes. It is a start-up cost that came
late, not the steady state.

Part of the step statistics (:func:`gpudoctor.analysis.steps.rank_step_stats` drops the steps
before it computes anything, so every view quotes figures without them); its limits are the
``oneoff_*`` fields of :class:`~gpudoctor.analysis.thresholds.Thresholds`.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from gpudoctor.analysis.host_work import named_ms
from gpudoctor.analysis.step_tail import episode_starts, stall_steps
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.step import StepRecord


@dataclass(frozen=True, slots=True)
class OneOff:
    """Steps left out of the steady figures because they happened once.

    Attributes:
        steps: the step indices (consecutive).
        step_ms: each one's time.
        median_ms: the median of the steady steps they were judged against (them included).
        reference_ms: the typical excess of the recurring stalls they were compared with (the
            median of the other stalled steps' time beyond the median), ``None`` when nothing
            else stalled (then they were compared with ``median_ms``).
        samples: each one's batch size (``None`` when unknown); ``typical_samples``: the median
            batch size of the steady steps.
    """

    steps: tuple[int, ...]
    step_ms: tuple[float, ...]
    median_ms: float
    reference_ms: float | None
    samples: tuple[int | None, ...]
    typical_samples: float | None

    @property
    def total_ms(self) -> float:
        return sum(self.step_ms)

    @property
    def excess_ms(self) -> float:
        """Their time beyond the median step, summed."""
        return sum(max(0.0, t - self.median_ms) for t in self.step_ms)

    @property
    def new_shape(self) -> bool:
        """A one-off step's batch holds a different number of samples than the typical one (the
        last, smaller batch of an epoch without ``drop_last``): a new input shape."""
        return self.typical_samples is not None and any(
            n is not None and n != self.typical_samples for n in self.samples)


def _excess(step: StepRecord, median_ms: float) -> float:
    return step.step_ms - median_ms


def _named(step: StepRecord, median_ms: float, thresholds: Thresholds) -> bool:
    """Most of the step's time beyond the median went to named host operations (a checkpoint,
    a full collection): the script's own work, which recurs in a longer run, not a start-up cost."""
    return named_ms(step) >= thresholds.tail_cause_min_share * (step.step_ms - median_ms)


def find_one_off(used: Sequence[StepRecord], thresholds: Thresholds) -> OneOff | None:
    """The one-off stall among the steady steps ``used`` (in step order), or ``None``.

    The candidates are the stalled steps as the tail sees them (longer than ``tail_slow_factor``
    x the median, the fewest that carry ``tail_excess_cover`` of the excess: jitter left out);
    compiling steps are left to the recompile finding, and steps whose time went mostly to named
    host operations (``torch.save``, a full collection) to the host-work finding. The longest of
    them is a one-off when its excess is at least ``oneoff_factor`` x the typical excess of the other stalled steps
    (their median), or, with no other stalled step, ``oneoff_factor`` x the median step; every
    step that passes the same bar must be next to it (one episode: a bar passed twice, apart,
    recurs and is a stall with a long period, not a one-off). It must cost at least
    ``oneoff_min_share`` of the steady steps' time, and at least ``oneoff_min_steps`` other
    steady steps must remain (a run too short to show that it does not recur keeps it).
    """
    if len(used) < thresholds.oneoff_min_steps + 1:
        return None
    median_ms = float(statistics.median(s.step_ms for s in used))
    if median_ms <= 0:
        return None
    slow = [s for s in used if s.step_ms > thresholds.tail_slow_factor * median_ms and not s.compiles
            and not _named(s, median_ms, thresholds)]
    stalled = stall_steps(slow, median_ms, thresholds.tail_excess_cover, thresholds.tail_stall_equal_frac)
    if not stalled:
        return None
    top = max(stalled, key=lambda s: s.step_ms)
    others = [s for s in stalled if s is not top]
    reference = float(statistics.median(_excess(s, median_ms) for s in others)) if others else None
    bar = thresholds.oneoff_factor * (reference if reference is not None else median_ms)
    giants = [s for s in stalled if _excess(s, median_ms) >= bar]
    if top not in giants or len(episode_starts(giants)) != 1:
        return None  # not far above the rest, or far above it more than once: it recurs
    if len(used) - len(giants) < thresholds.oneoff_min_steps:
        return None
    total = sum(s.step_ms for s in used)
    if sum(_excess(s, median_ms) for s in giants) < thresholds.oneoff_min_share * total:
        return None  # it moves the steady figures by less than the run-to-run noise
    sizes = [float(s.samples) for s in used if s.samples is not None]
    return OneOff(steps=tuple(s.step for s in giants), step_ms=tuple(s.step_ms for s in giants),
                  median_ms=median_ms, reference_ms=reference,
                  samples=tuple(s.samples for s in giants),
                  typical_samples=float(statistics.median(sizes)) if len(sizes) * 2 >= len(used) else None)


def one_off_cause(one: OneOff, cudnn_benchmark: bool | None, drop_last: bool | None) -> str | None:
    """The likely cause the records show, or ``None``: a batch of another size is a new input
    shape (with ``cudnn.benchmark`` on, cuDNN autotunes every new shape once)."""
    if not one.new_shape:
        return None
    sizes = ", ".join(str(n) for n in dict.fromkeys(one.samples) if n is not None)
    line = f"a batch of {sizes} samples, not {one.typical_samples:.0f}: a new input shape"
    if cudnn_benchmark:
        line += " that cudnn.benchmark autotunes once"
    return line + (", drop_last=True (or a fixed shape) avoids it" if drop_last is False
                   else ", a fixed input shape avoids it")


def one_off_line(one: OneOff, cause: str | None = None) -> str:
    """``one-time: step 15, 1.2 s (median step 19.6 ms) - left out of the steady figures; ...``."""
    label = "step" if len(one.steps) == 1 else "steps"
    where = (str(one.steps[0]) if len(one.steps) == 1 else f"{one.steps[0]}-{one.steps[-1]}")
    took = one.total_ms
    size = f"{took / 1000:.1f} s" if took >= 1000 else f"{took:.0f} ms"
    return (f"one-time: {label} {where}, {size} (median step {one.median_ms:.1f} ms)"
            + (f"; {cause}" if cause else "") + " — left out of the steady figures")


__all__ = ["OneOff", "find_one_off", "one_off_cause", "one_off_line"]
