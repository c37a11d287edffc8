"""Estimate the peak memory of training a model at a batch size, activations included.

Accelerate's and DeepSpeed's estimators count weights, gradients and optimizer state only
(anchors §4.8). Here the activations are *measured*: the model trains for a couple of real steps
(forward, loss, backward, optimizer step) at two small batch sizes, and the peak is extrapolated
linearly in the batch size (:mod:`gpudoctor.analysis.memory_model`).

- On a GPU the peaks come from the CUDA caching allocator (``max_memory_allocated``), so they
  include cuDNN/cuBLAS workspaces, autocast weight copies and the optimizer's temporaries.
- On a CPU there is no allocator to ask: the activations are the bytes of the tensors autograd
  saves for backward (``torch.autograd.graph.saved_tensors_hooks``), added to weights, gradients
  and optimizer state counted from the model.

Command-line equivalent of the GPU measurement::

    torch.cuda.reset_peak_memory_stats(); <one training step>; torch.cuda.max_memory_allocated()
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpudoctor.analysis import memory_model
from gpudoctor.core.memory import release_cached_memory
from gpudoctor.records.memory import MemoryEstimate, MemoryPoint, StageMemory

PRECISIONS = ("fp32", "bf16", "fp16")
OPTIMIZERS = ("adamw", "adam", "sgd", "sgd_momentum")

BatchFactory = Callable[[int, Any], tuple[Any, Any]]  # (batch_size, device) -> (inputs, targets)


@dataclass(frozen=True, kw_only=True)
class EstimateConfig:
    """How to estimate.

    Attributes:
        batch_size: the batch size to estimate for (per GPU).
        optimizer: ``adamw``, ``adam``, ``sgd`` or ``sgd_momentum``.
        precision: ``fp32``, or ``bf16``/``fp16`` autocast (weights stay fp32).
        probe_batches: the small batch sizes actually run; default: two sizes below ``batch_size``.
        device: ``auto`` (GPU if available), ``cuda``, ``cuda:N`` or ``cpu``.
        margin: share of device memory kept free when computing the largest batch that fits.
        steps: training steps per probe; the peak of the last one counts (step 1 creates state).
    """

    batch_size: int
    optimizer: str = "adamw"
    precision: str = "fp32"
    probe_batches: tuple[int, ...] = ()
    device: str = "auto"
    margin: float = 0.1
    steps: int = 2

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {self.batch_size}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer {self.optimizer!r} is not one of {', '.join(OPTIMIZERS)}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision {self.precision!r} is not one of {', '.join(PRECISIONS)}")
        if self.steps < 2:
            raise ValueError("steps must be at least 2: the optimizer state appears in step 1")
        if not 0 <= self.margin < 1:  # also refuses nan
            raise ValueError(f"--margin is the share of GPU memory kept free, from 0 up to (not "
                             f"including) 1, e.g. 0.1; got {self.margin}")
        if any(b < 1 for b in self.probe_batches):
            raise ValueError(f"probe batch sizes must be positive, got {self.probe_batches}")

    def probes(self) -> tuple[int, ...]:
        if self.probe_batches:
            return tuple(sorted(set(self.probe_batches)))
        b = self.batch_size
        low, high = max(1, b // 8), max(2, b // 4)
        return (low, high) if high > low else (1, 2)


def _optimizer(name: str, params):
    import torch

    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-4)
    if name == "sgd_momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    return torch.optim.SGD(params, lr=1e-3)


def default_loss(output, target):
    """Cross-entropy over the last dimension (classifier logits or LM logits)."""
    import torch.nn.functional as F

    if isinstance(output, (tuple, list)):
        output = output[0]
    return F.cross_entropy(output.float().reshape(-1, output.shape[-1]), target.reshape(-1))


def _autocast(device, precision: str):
    import contextlib

    import torch

    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def measure_point(model_factory, make_batch, batch, config, device, loss_fn=None) -> MemoryPoint:
    """Train ``config.steps`` real steps at ``batch`` on a GPU; the last step's stage peaks.

    This is also the ground truth an estimate is checked against.
    """
    import torch

    loss_fn = loss_fn or default_loss
    torch.cuda.synchronize(device)
    model = model_factory().to(device)
    opt = _optimizer(config.optimizer, model.parameters())
    scaler = torch.amp.GradScaler("cuda") if config.precision == "fp16" else None
    stages: list[StageMemory] = []

    def mark(stage: str, step: int) -> None:
        # sync point: memory_stats reads host counters, but peaks must cover finished kernels
        torch.cuda.synchronize(device)
        stats = torch.cuda.memory_stats(device)
        stages.append(StageMemory(
            stage=stage, step=step,
            allocated_bytes=int(stats["allocated_bytes.all.current"]),
            reserved_bytes=int(stats["reserved_bytes.all.current"]),
            peak_allocated_bytes=int(stats["allocated_bytes.all.peak"]),
        ))
        torch.cuda.reset_peak_memory_stats(device)

    mark("model", 0)
    for step in range(config.steps):
        inputs, target = make_batch(batch, device)
        mark("batch", step)
        with _autocast(device, config.precision):
            loss = loss_fn(model(inputs), target)
        mark("forward", step)
        (scaler.scale(loss) if scaler else loss).backward()
        mark("backward", step)
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        mark("optimizer", step)
        opt.zero_grad(set_to_none=True)
        del inputs, target, loss
        mark("zero_grad", step)
    last = config.steps - 1
    peak = max(s.peak_allocated_bytes for s in stages if s.step == last and s.stage != "model")
    del model, opt
    release_cached_memory()
    return MemoryPoint(batch_size=batch, peak_allocated_bytes=peak, stages=tuple(stages))


def _saved_tensor_bytes(model, make_batch, batch, config, device, loss_fn) -> int:
    """Bytes autograd keeps for backward in one forward pass (parameters excluded)."""
    import torch

    param_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in param_storages and ptr not in seen:
            seen[ptr] = storage.nbytes()
        return t

    inputs, target = make_batch(batch, device)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with _autocast(device, config.precision):
            loss = loss_fn(model(inputs), target)
    del loss
    return sum(seen.values())


def estimate_memory(
    model_factory: Callable[[], Any],
    make_batch: BatchFactory,
    config: EstimateConfig,
    *,
    loss_fn: Callable[[Any, Any], Any] = default_loss,
    model_name: str = "",
) -> MemoryEstimate:
    """Estimate the peak memory of training ``model_factory()`` at ``config.batch_size``.

    Args:
        model_factory: builds a fresh model on the CPU (called once per probe).
        make_batch: ``(batch_size, device) -> (inputs, targets)`` on ``device``.
        config: what to estimate and how.
        loss_fn: ``(output, target) -> loss``; cross-entropy over the last dimension by default.
        model_name: shown in the result.

    Raises:
        torch.OutOfMemoryError: a probe batch does not fit (choose smaller ``probe_batches``).
    """
    import torch

    from gpudoctor.core.device import select_device

    device = select_device(config.device)
    model = model_factory()
    name = model_name or type(model).__name__
    param_count = sum(p.numel() for p in model.parameters())
    params_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    all_param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    state_bytes = memory_model.optimizer_state_bytes(config.optimizer, params_bytes)
    points: list[MemoryPoint] = []
    capacity = None
    if device.type == "cuda":
        del model
        capacity = int(torch.cuda.get_device_properties(device).total_memory)
        for batch in config.probes():
            points.append(measure_point(model_factory, make_batch, batch, config, device, loss_fn))
        fixed, per_sample = memory_model.fit_affine(
            [(p.batch_size, p.peak_allocated_bytes) for p in points]
        )
        method = "measured-peaks"
    else:
        model = model.to(device)
        saved = [
            (b, _saved_tensor_bytes(model, make_batch, b, config, device, loss_fn))
            for b in config.probes()
        ]
        base, per_sample = memory_model.fit_affine(saved)
        fixed = all_param_bytes + params_bytes + state_bytes + base
        points = [
            MemoryPoint(batch_size=b, peak_allocated_bytes=int(fixed + per_sample * b))
            for b, _ in saved
        ]
        method = "saved-tensors"
    peak = memory_model.peak_at(fixed, per_sample, config.batch_size)
    max_batch = None
    if capacity is not None:
        max_batch = memory_model.max_batch_that_fits(fixed, per_sample, capacity, margin=config.margin)
    return MemoryEstimate(
        model=name,
        batch_size=config.batch_size,
        device=str(device),
        method=method,
        precision=config.precision,
        optimizer=config.optimizer,
        param_count=param_count,
        params_bytes=all_param_bytes,
        grads_bytes=params_bytes,
        optimizer_state_bytes=state_bytes,
        activation_bytes_per_sample=int(round(per_sample)),
        fixed_bytes=int(round(fixed)),
        peak_bytes=peak,
        points=tuple(points),
        capacity_bytes=capacity,
        max_batch_size=max_batch,
        margin=config.margin,
    )
