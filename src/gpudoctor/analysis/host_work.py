"""What the host did besides training, by named operation, over a rank's steady steps.

The probes time serialization (``torch.save``/``torch.load``) and garbage collection in every
step (:class:`~gpudoctor.records.step.HostOp`) and sample the training thread's stack in steps
that run long (:class:`~gpudoctor.records.step.HostFrame`). This module sums them per rank:

* per operation, its time in a typical step (the median) and the steps where it alone made the
  step slow (its time beyond the typical one at least ``tail_slow_factor - 1`` median steps),
  with what removing it from them would save: its time beyond the typical step, capped by the
  step's own time beyond the median step and, where the GPU timeline is known, by how much
  longer the GPU's span of that step was than the median span (work the GPU had queued hides
  a host pause; it cannot hide more than that);
* the sampled frames of the script's own code, by site, with the steps they were seen in.

Part of the step statistics (:func:`gpudoctor.analysis.steps.rank_step_stats`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.step import StepRecord


@dataclass(frozen=True, slots=True)
class HostOpCost:
    """One named operation over the steady steps.

    Attributes:
        op: ``torch.save``, ``torch.load`` or ``gc`` (``HostOp.op``).
        total_ms, calls, bytes, gen2: summed over the steady steps.
        typical_ms: its median time per steady step (0.0 for work done every N steps).
        spike_steps: the steps it alone made slow; ``spike_ms``: its time beyond
            ``typical_ms`` in each of them.
        spike_cost_ms: what those steps would save without it (module docstring).
        site: the script's frame that called it for the most time (empty for ``gc``).
        n_steps: the steady steps it was judged over.
    """

    op: str
    total_ms: float
    calls: int
    bytes: int
    gen2: int
    typical_ms: float
    spike_steps: tuple[int, ...]
    spike_ms: tuple[float, ...]
    spike_cost_ms: float
    site: str
    n_steps: int

    @property
    def spike_bytes_per_step(self) -> float:
        """Bytes per call (the size of a checkpoint)."""
        return self.bytes / self.calls if self.calls else 0.0


@dataclass(frozen=True, slots=True)
class FrameCost:
    """Where the stack sampler found the training thread, by function, over the steady steps.

    ``site`` is ``function (file.py:40)`` (its most sampled line); ``op``: the named operation running then (or
    empty); ``lib``: the innermost library frame seen most (``torch.nn.modules.conv.forward``);
    ``steps``: the steps it was sampled in; ``callers``: the outer frames of the script's code.
    """

    site: str
    function: str
    ms: float
    samples: int
    op: str
    lib: str
    steps: tuple[int, ...]
    callers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class HostWork:
    """The named operations (largest time first) and sampled frames (most samples first)."""

    ops: tuple[HostOpCost, ...] = ()
    frames: tuple[FrameCost, ...] = ()

    def op(self, name: str) -> HostOpCost | None:
        return next((o for o in self.ops if o.op == name), None)


def named_ms(step: StepRecord) -> float:
    """The named operations' time in ``step`` (serialization, collections), summed."""
    return sum(o.ms for o in step.host_ops)


def _op_ms(step: StepRecord, op: str) -> float:
    return sum(o.ms for o in step.host_ops if o.op == op)


def _gpu_extra(step: StepRecord, gpu_median: float | None) -> float | None:
    if step.gpu_ms is None or gpu_median is None:
        return None
    return max(0.0, step.gpu_ms - gpu_median)


def _op_cost(op: str, used: Sequence[StepRecord], step_ms: float, gpu_median: float | None,
             thresholds: Thresholds) -> HostOpCost:
    times = [_op_ms(s, op) for s in used]
    typical = float(statistics.median(times))
    bar = (thresholds.tail_slow_factor - 1.0) * step_ms
    spikes = [(s, t - typical) for s, t in zip(used, times) if t - typical >= bar and t - typical > 0]
    cost = 0.0
    for s, beyond in spikes:
        saved = min(beyond, max(0.0, s.step_ms - step_ms))
        gpu = _gpu_extra(s, gpu_median)
        cost += saved if gpu is None else min(saved, gpu)
    sites: dict[str, float] = {}
    calls = nbytes = gen2 = 0
    for s in used:
        for o in s.host_ops:
            if o.op == op:
                calls += o.calls
                nbytes += o.bytes
                gen2 += o.gen2
                if o.site:
                    sites[o.site] = sites.get(o.site, 0.0) + o.ms
    return HostOpCost(op=op, total_ms=sum(times), calls=calls, bytes=nbytes, gen2=gen2, typical_ms=typical,
                      spike_steps=tuple(s.step for s, _ in spikes), spike_ms=tuple(b for _, b in spikes),
                      spike_cost_ms=cost, site=max(sites, key=sites.get) if sites else "", n_steps=len(used))


def _frames(used: Sequence[StepRecord]) -> tuple[FrameCost, ...]:
    """The sampled frames by function (a function's lines are one site, named by its most
    sampled line), the library kind by the samples of all its lines."""
    acc: dict[tuple[str, str, str], list] = {}
    for s in used:
        for f in s.host_frames:
            entry = acc.setdefault((f.function, f.file, f.op), [{}, 0.0, 0, {}, [], f.callers])
            entry[0][f.line] = entry[0].get(f.line, 0) + f.samples
            entry[1] += f.ms
            entry[2] += f.samples
            if f.lib:
                entry[3][f.lib] = entry[3].get(f.lib, 0) + f.samples
            if s.step not in entry[4]:
                entry[4].append(s.step)
    rows = []
    for (function, file, op), e in acc.items():
        line = max(e[0], key=e[0].get)
        site = f"{function} ({file.replace(chr(92), '/').rsplit('/', 1)[-1]}:{line})"
        rows.append(FrameCost(site=site, function=function, ms=e[1], samples=e[2], op=op,
                              lib=max(e[3], key=e[3].get) if e[3] else "", steps=tuple(e[4]),
                              callers=tuple(e[5])))
    return tuple(sorted(rows, key=lambda r: (-r.samples, r.site)))


def host_work(used: Sequence[StepRecord], step_ms: float, thresholds: Thresholds) -> HostWork:
    """The host work of the steady steps ``used`` against their median step ``step_ms``."""
    names = sorted({o.op for s in used for o in s.host_ops})
    gpu = [s.gpu_ms for s in used if s.gpu_ms is not None]
    gpu_median = float(statistics.median(gpu)) if gpu and len(gpu) * 2 >= len(used) else None
    ops = [_op_cost(op, used, step_ms, gpu_median, thresholds) for op in names] if used else []
    return HostWork(ops=tuple(sorted(ops, key=lambda o: -o.total_ms)), frames=_frames(used))


__all__ = ["FrameCost", "HostOpCost", "HostWork", "host_work", "named_ms"]
