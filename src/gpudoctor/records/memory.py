"""Allocator statistics as plain data (from ``torch.cuda.memory_stats``)."""

from __future__ import annotations

from gpudoctor.records.base import record


@record
class AllocatorStats:
    """The caching allocator's counters for one device at one moment.

    ``reserved - allocated`` is memory the allocator holds but no tensor uses; a large gap with
    ``alloc_retries > 0`` is the fragmentation signature (``expandable_segments:True`` helps).
    """

    allocated_bytes: int
    reserved_bytes: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    inactive_split_bytes: int = 0
    alloc_retries: int = 0
    ooms: int = 0
    active_bytes: int = 0


@record
class StageMemory:
    """Allocator memory right after one stage of a training step.

    Stages, in order: ``model`` (model on the device), ``batch`` (batch on the device),
    ``forward``, ``backward``, ``optimizer`` (after ``optimizer.step()``; the first step creates
    the optimizer state), ``zero_grad``.
    """

    stage: str
    step: int
    allocated_bytes: int
    reserved_bytes: int
    peak_allocated_bytes: int  # peak since the previous stage
    # ``zero_grad`` only: bytes the call freed (the previous step's gradients, set_to_none=True).
    freed_bytes: int = 0


@record
class MemoryPoint:
    """Peak memory of real training steps at one batch size."""

    batch_size: int
    peak_allocated_bytes: int
    stages: tuple[StageMemory, ...] = ()


@record
class MemoryEstimate:
    """What a model needs at a batch size, by part, before running it for real.

    ``params + grads + optimizer_state`` are counted from the model and optimizer; activations are
    measured by running forward/backward at small batch sizes and scaling linearly in the batch.
    """

    model: str
    batch_size: int
    device: str  # where the small steps ran: "cuda:0", "cpu"
    method: str  # "measured-peaks" (CUDA allocator) or "saved-tensors" (CPU, analytic)
    precision: str
    optimizer: str
    param_count: int
    params_bytes: int
    grads_bytes: int
    optimizer_state_bytes: int
    activation_bytes_per_sample: int
    fixed_bytes: int  # batch-independent part of the peak (weights, states, workspaces)
    peak_bytes: int  # estimated peak allocated at ``batch_size``
    points: tuple[MemoryPoint, ...] = ()
    capacity_bytes: int | None = None  # device memory, when known
    max_batch_size: int | None = None  # largest batch whose estimate fits capacity with margin
    margin: float = 0.1


@record
class LiveBlock:
    """A block of device memory live at the moment of an out-of-memory error."""

    size_bytes: int
    frames: tuple[str, ...] = ()  # "file.py:123 function", innermost first, Python frames only
    stream: int = 0


@record
class OomSnapshot:
    """What the allocator held when an allocation failed, reduced from ``torch.cuda.memory._snapshot()``.

    The full snapshot is also dumped as a pickle for PyTorch's own viewer
    (drag it onto pytorch.org/memory_viz, or
    ``python -m torch.cuda._memory_viz trace_plot snapshot.pickle -o snapshot.html``).
    """

    device: int
    requested_bytes: int
    allocated_bytes: int  # by tensors, per the allocator
    reserved_bytes: int  # held by the caching allocator (allocated + cached free blocks)
    device_free_bytes: int  # free on the device per the driver at the moment of the OOM
    device_total_bytes: int
    blocks: tuple[LiveBlock, ...] = ()
    inactive_split_bytes: int = 0
    alloc_retries: int = 0
    pickle_path: str = ""  # the full snapshot, for PyTorch's memory viewer
    step: int | None = None


@record
class ModuleMemory:
    """One module's forward in a probed step (``gpudoctor memory run --modules``).

    Measured by forward pre/post hooks around each call: ``kept_bytes`` is allocated after minus
    before (the output and the tensors autograd saved for backward, summed over the step's
    calls); ``peak_bytes`` the allocator's peak inside the call minus allocated before it (the
    largest over the calls): what ``torch.cuda.reset_peak_memory_stats()`` before and
    ``max_memory_allocated() - memory_allocated()`` after one call measure by hand.
    """

    step: int
    name: str  # qualified name in the trained model ("layer1.0.conv1"); "" for the model itself
    type: str  # class name ("Conv2d")
    depth: int  # 0: the trained model, 1: its children, ...
    calls: int
    kept_bytes: int
    peak_bytes: int
    order: int = 0  # first call's position in the step


@record
class SiteGrowth:
    """Live bytes of one allocation site (the user's ``file:line function``) at two steps."""

    site: str
    bytes_from: int
    bytes_to: int
    blocks_from: int
    blocks_to: int


@record
class LeakSites:
    """Allocation sites whose live bytes grew between two steps: memory mode records allocation
    history for the whole run and compares two reduced snapshots after the probed ones, at the
    optimizer's step pre-hook; plain ``run`` records it for a few steps once the allocated bytes
    grew and compares them at the step boundary (``collectors.instrument.leak_probe``).

    ``history_steps``: the steps (first, last, inclusive) that plain ``run`` ran with the
    allocation history it turned on: every allocation recorded a stack, so they are slower and
    are left out of the step statistics, like the profiler window. ``None`` in memory mode
    (history on all run), when the script kept its own history on, and in older recordings.
    ``step_to`` is ``-1`` (no sites) when the recording ended before its second snapshot (the
    script ended, or a snapshot failed); ``step_from`` is then ``-1`` too if no base was taken."""

    step_from: int
    step_to: int
    sites: tuple[SiteGrowth, ...] = ()
    history_steps: tuple[int, int] | None = None


@record
class WhatIf:
    """What one change would do to a memory estimate (``memory estimate --what-if``)."""

    change: str  # "checkpointing", "adafactor", "adamw8bit", "micro-batch=8"
    part: str  # the part it changes: "activations" or "optimizer state"
    before_bytes: int  # that part now, at the estimate's batch size
    after_bytes: int  # that part with the change
    peak_before_bytes: int
    peak_after_bytes: int
    how: str  # how the new figure is known
    notes: tuple[str, ...] = ()
