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
