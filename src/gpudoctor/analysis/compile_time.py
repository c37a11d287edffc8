"""Time spent compiling (``torch.compile``), per rank: its own line in every view of a run.

Compilation is start-up work, not a stall and not the step's cost: the probes time it from
torch's compile callbacks (``StepRecord.compile_ms``, every step, warm-up included) and the
views say how long it took and in which steps. A torch without those callbacks still counts the
frames compiled per step (``StepRecord.compiles``): the line then names the steps and their wall
time, which bounds the compile time from above. Recompiling after warm-up stays the finding of
:mod:`gpudoctor.analysis.compile_rules`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpudoctor.records.step import StepRecord

_SHOWN_RANGES = 6  # step ranges named on the line before "..."


@dataclass(frozen=True, slots=True)
class CompileTime:
    """What one rank compiled over the whole run (warm-up included)."""

    rank: int
    steps: tuple[int, ...]  # steps that compiled
    compile_ms: float | None  # measured compile time; None where this torch reports none
    frames: int  # frames TorchDynamo compiled (its counter), 0 when not counted
    steps_ms: float  # the wall time of those steps


def compile_time(rank: int, steps: Sequence[StepRecord]) -> CompileTime | None:
    """The compile time of ``rank``'s ``steps``; ``None`` when it never compiled."""
    measured = any(s.compile_ms is not None for s in steps)
    if measured:
        hit = [s for s in steps if (s.compile_ms or 0.0) > 0.0]
    else:
        hit = [s for s in steps if s.compiles]
    if not hit:
        return None
    return CompileTime(
        rank=rank,
        steps=tuple(s.step for s in hit),
        compile_ms=sum(s.compile_ms or 0.0 for s in hit) if measured else None,
        frames=sum(s.compiles or 0 for s in hit),
        steps_ms=sum(s.step_ms for s in hit),
    )


def step_ranges(steps: Sequence[int]) -> str:
    """``0, 1, 2, 7, 9, 10`` -> ``"0-2, 7, 9-10"`` (at most :data:`_SHOWN_RANGES` ranges)."""
    ranges: list[list[int]] = []
    for step in steps:
        if ranges and step == ranges[-1][1] + 1:
            ranges[-1][1] = step
        else:
            ranges.append([step, step])
    text = [f"{a}" if a == b else f"{a}-{b}" for a, b in ranges[:_SHOWN_RANGES]]
    return ", ".join(text) + (", ..." if len(ranges) > _SHOWN_RANGES else "")


def _seconds(ms: float) -> str:
    return f"{ms / 1000:.1f} s" if ms >= 100 else f"{ms:.0f} ms"


def compile_line(ct: CompileTime) -> str:
    """The line every view prints, e.g. ``rank 0: compiling (torch.compile) took 41.2 s, in
    steps 0-1, 7``."""
    label = "step" if len(ct.steps) == 1 else "steps"
    where = f"{label} {step_ranges(ct.steps)}"
    if ct.compile_ms is not None:
        return f"rank {ct.rank}: compiling (torch.compile) took {_seconds(ct.compile_ms)}, in {where}"
    frames = f"{ct.frames} frame{'s' if ct.frames != 1 else ''}"
    return (f"rank {ct.rank}: torch.compile compiled {frames} in {where}, which took "
            f"{_seconds(ct.steps_ms)} in all (this torch reports no compile time of its own)")


__all__ = ["CompileTime", "compile_line", "compile_time", "step_ranges"]
