"""Where the bytes of a training step go, from a ``gpudoctor memory run`` directory (pure).

Reads the stage lines (:class:`StageMemory`), the per-step allocator counters
(``StepRecord.mem``) and, when the script ran out of memory, ``oom.json``. The leak,
fragmentation and headroom verdicts are the rules of :mod:`gpudoctor.analysis.memory_rules`,
called as they are; this module adds the per-stage breakdown and the batch extrapolation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpudoctor.analysis.facts import run_facts
from gpudoctor.analysis.memory_leak_sites import name_leak_sites
from gpudoctor.analysis.memory_model import max_batch_that_fits
from gpudoctor.analysis.memory_modules import ModuleTable, module_table
from gpudoctor.analysis.memory_rules import CODE_LEAK, check_fragmentation, check_headroom, check_leak
from gpudoctor.analysis.oom import AllocationSite, explain_oom, top_sites
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Finding
from gpudoctor.records.memory import LeakSites, StageMemory
from gpudoctor.records.rundir import RunData

WHAT = {
    "model": "weights, start-up",
    "batch": "+ the batch",
    "forward": "+ activations",
    "loss": "+ the loss (after the forward)",
    "backward": "+ gradients, - activations",
    "optimizer": "+ optimizer state (created at step 0)",
    "zero_grad": "- the previous gradients",
}


def what_it_holds(stage: str, step: int | None) -> str:
    """What a stage adds or frees, in words (the optimizer's state appears at its first step)."""
    if stage == "optimizer" and step is not None and step > 0:
        return "the update (state already there)"
    return WHAT.get(stage, "")


@dataclass(frozen=True)
class StageRow:
    """One stage line with its change from the stage before."""

    step: int
    stage: str
    allocated_bytes: int
    reserved_bytes: int
    peak_allocated_bytes: int
    delta_bytes: int  # allocated minus the previous line's allocated
    freed_bytes: int = 0  # zero_grad only: what the call freed


@dataclass(frozen=True)
class MemoryParts:
    """What each part of a step adds, in bytes (``None``: the stage was not seen)."""

    model_bytes: int | None
    batch_bytes: int | None
    activation_bytes: int | None  # forward - batch (+ freed by zero_grad between), last probed step
    # backward - batch (+ freed by zero_grad between), last probed step: the gradients made in
    # the step; about 0 when the script keeps them between steps (zero_grad(set_to_none=False))
    gradient_bytes: int | None
    backward_peak_bytes: int | None  # the peak between forward and backward (step 0)
    optimizer_first_bytes: int | None  # optimizer - backward at step 0: the state is created
    optimizer_later_bytes: int | None  # the same at the last probed step (about 0 when steady)
    peak_bytes: int | None  # highest stage peak
    # loss - forward, last probed step (what was made between the forward's end and backward());
    # None when the script's forward was not seen as a module call (then "forward" holds it)
    loss_bytes: int | None = None


@dataclass(frozen=True)
class CurvePoint:
    step: int
    allocated_bytes: int
    reserved_bytes: int
    peak_allocated_bytes: int


@dataclass(frozen=True)
class Fragmentation:
    cached_free_bytes: int  # reserved - allocated at the last step
    inactive_split_bytes: int
    alloc_retries: int
    advice: str  # "" or the PYTORCH_CUDA_ALLOC_CONF line


@dataclass(frozen=True)
class BatchFit:
    """The largest batch that would fit, extrapolated from the activations of the probed batch."""

    batch_size: int
    activation_bytes_per_sample: int
    fixed_bytes: int  # peak minus the batch's activations
    capacity_bytes: int
    headroom_bytes: int  # capacity - peak
    max_batch_size: int | None
    margin: float  # share of GPU memory kept free (Thresholds.batch_fit_margin)


@dataclass(frozen=True)
class MemoryRunReport:
    """Everything ``gpudoctor memory run`` shows."""

    rank: int | None
    on_gpu: bool  # stage lines were recorded (the CUDA allocator had statistics)
    rows: tuple[StageRow, ...] = ()
    parts: MemoryParts | None = None
    curve: tuple[CurvePoint, ...] = ()
    fragmentation: Fragmentation | None = None
    fit: BatchFit | None = None
    findings: tuple[Finding, ...] = ()  # leak / fragmentation / headroom rules, then the OOM
    oom_sites: tuple[AllocationSite, ...] = ()
    oom_pickle: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    modules: ModuleTable | None = None  # memory run --modules
    leak_sites: LeakSites | None = None  # sites whose live bytes grew after the probed steps


def stage_rows(stages: list[StageMemory]) -> list[StageRow]:
    """The stage lines in recorded order, each with its change from the line before."""
    rows, previous = [], 0
    for s in stages:
        rows.append(StageRow(step=s.step, stage=s.stage, allocated_bytes=s.allocated_bytes,
                             reserved_bytes=s.reserved_bytes, peak_allocated_bytes=s.peak_allocated_bytes,
                             delta_bytes=s.allocated_bytes - previous, freed_bytes=s.freed_bytes))
        previous = s.allocated_bytes
    return rows


def _at(stages: list[StageMemory], stage: str, step: int) -> StageMemory | None:
    return next((s for s in stages if s.stage == stage and s.step == step), None)


def _diff(a: StageMemory | None, b: StageMemory | None) -> int | None:
    return None if a is None or b is None else a.allocated_bytes - b.allocated_bytes


def _added_since_batch(stages: list[StageMemory], step: int, stage: str) -> int | None:
    """Bytes ``stage`` holds beyond the batch stage of ``step``, counting what ``zero_grad`` freed
    in between (gradients of the previous step still alive when the batch arrived)."""
    rows = [s for s in stages if s.step == step and s.stage != "model"]
    base = next((i for i, s in enumerate(rows) if s.stage == "batch"), None)
    end = next((i for i, s in enumerate(rows) if s.stage == stage), None)
    if base is None or end is None or end < base:
        return None
    freed = sum(s.freed_bytes for s in rows[base + 1:end] if s.stage == "zero_grad")
    return rows[end].allocated_bytes - rows[base].allocated_bytes + freed


def stage_parts(stages: list[StageMemory]) -> MemoryParts:
    """Split the probed steps into model, batch, activations, gradients and optimizer state."""
    steps = sorted({s.step for s in stages if s.stage != "model"})
    first = steps[0] if steps else 0
    last = steps[-1] if steps else 0
    model = next((s for s in stages if s.stage == "model"), None)
    batch0 = _at(stages, "batch", first)
    backward = _at(stages, "backward", last)
    backward0 = _at(stages, "backward", first)
    forward = _added_since_batch(stages, last, "forward")
    loss = _added_since_batch(stages, last, "loss")
    return MemoryParts(
        loss_bytes=loss - forward if loss is not None and forward is not None else None,
        model_bytes=model.allocated_bytes if model else None,
        batch_bytes=_diff(batch0, model),
        activation_bytes=forward,
        gradient_bytes=_added_since_batch(stages, last, "backward"),
        backward_peak_bytes=backward0.peak_allocated_bytes if backward0 else None,
        optimizer_first_bytes=_diff(_at(stages, "optimizer", first), backward0),
        optimizer_later_bytes=(_diff(_at(stages, "optimizer", last), backward) if last != first else None),
        peak_bytes=max((s.peak_allocated_bytes for s in stages), default=None),
    )


def analyse_memory_run(run: RunData, thresholds: Thresholds | None = None, *,
                       modules_requested: bool = False) -> MemoryRunReport:
    """The memory report of a run directory recorded by ``gpudoctor memory run``
    (``modules_requested``: ``--modules`` was given, so its absence is worth a note)."""
    th = thresholds or Thresholds()
    ranks = sorted(set(run.memory) | set(run.steps) | set(run.configs))
    rank = ranks[0] if ranks else None
    stages = run.memory.get(rank, []) if rank is not None else []
    steps = run.steps.get(rank, []) if rank is not None else []
    notes: list[str] = []
    if not stages:
        notes.append("no memory stages recorded: the CUDA allocator keeps no statistics on the CPU; "
                     "memory stages need a CUDA GPU")
    # The stage probes reset the peak at every stage, so a probed step's own record only holds the
    # peak since its last stage: its real peak is the larger of that and its stages' peaks.
    stage_peak: dict[int, int] = {}
    for st in stages:
        if st.stage != "model":
            stage_peak[st.step] = max(stage_peak.get(st.step, 0), st.peak_allocated_bytes)
    curve = tuple(CurvePoint(step=s.step, allocated_bytes=s.mem.allocated_bytes,
                             reserved_bytes=s.mem.reserved_bytes,
                             peak_allocated_bytes=max(s.mem.peak_allocated_bytes, stage_peak.get(s.step, 0)))
                  for s in steps if s.mem is not None)
    findings: list[Finding] = []
    if steps:
        facts = run_facts(run, th)
        findings += check_leak(facts, th) + check_fragmentation(facts, th) + check_headroom(facts, th)
    sites = run.leak_sites.get(rank) if rank is not None else None
    findings = name_leak_sites(findings, sites, CODE_LEAK)
    modules = module_table(run.modules.get(rank, [])) if rank is not None else None
    if modules_requested and modules is None:
        notes.append("no module memory recorded: per-module forward memory reads the CUDA allocator's "
                     "peak counter and needs a CUDA GPU (on a CPU, `gpudoctor memory estimate` measures "
                     "activations from the tensors autograd saves)" if not stages else
                     "no module memory recorded: no forward of a module with trainable parameters was "
                     "seen in the measured step")
    frag = None
    last_mem = next((s.mem for s in reversed(steps) if s.mem is not None), None)
    if last_mem is not None:
        conf = run.configs[rank].alloc_conf if rank in run.configs else ""
        cached = max(last_mem.reserved_bytes - last_mem.allocated_bytes, 0)
        # Split blocks nobody can reuse, or retries (the allocator freed its cache and tried
        # again): the signatures expandable segments remove. A few split bytes are normal.
        split_heavy = last_mem.inactive_split_bytes >= th.frag_min_waste_frac * max(last_mem.reserved_bytes, 1)
        helps = (last_mem.alloc_retries > 0 or split_heavy) and "expandable_segments:True" not in conf
        frag = Fragmentation(
            cached_free_bytes=cached, inactive_split_bytes=last_mem.inactive_split_bytes,
            alloc_retries=last_mem.alloc_retries,
            advice="export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" if helps else "",
        )
    parts = stage_parts(stages) if stages else None
    fit = _fit(run, rank, parts, steps, th.batch_fit_margin)
    oom_sites: tuple[AllocationSite, ...] = ()
    pickle = ""
    if run.oom is not None:
        findings += explain_oom(run.oom)
        oom_sites = tuple(top_sites(run.oom, limit=10))
        pickle = run.oom.pickle_path
    return MemoryRunReport(
        rank=rank, on_gpu=bool(stages), rows=tuple(stage_rows(stages)), parts=parts, curve=curve,
        fragmentation=frag, fit=fit, findings=tuple(findings), oom_sites=oom_sites,
        oom_pickle=pickle, notes=tuple(notes), modules=modules,
        leak_sites=sites if sites is not None and sites.sites else None,
    )


def _fit(run: RunData, rank: int | None, parts: MemoryParts | None, steps: list,
         margin: float) -> BatchFit | None:
    if parts is None or parts.activation_bytes is None or parts.peak_bytes is None or rank is None:
        return None
    batch = next((s.samples for s in steps if s.samples), None)
    config = run.configs.get(rank)
    capacity = config.gpu_total_memory_bytes if config is not None else None
    if not batch or not capacity or parts.activation_bytes <= 0:
        return None
    per_sample = (parts.activation_bytes + max(parts.loss_bytes or 0, 0)) // batch
    fixed = parts.peak_bytes - per_sample * batch
    return BatchFit(
        batch_size=batch, activation_bytes_per_sample=per_sample, fixed_bytes=fixed,
        capacity_bytes=capacity, headroom_bytes=capacity - parts.peak_bytes,
        max_batch_size=max_batch_that_fits(fixed, per_sample, capacity, margin=margin),
        margin=margin,
    )


__all__ = ["BatchFit", "CurvePoint", "Fragmentation", "MemoryParts", "MemoryRunReport", "StageRow",
           "analyse_memory_run", "stage_parts", "stage_rows"]
