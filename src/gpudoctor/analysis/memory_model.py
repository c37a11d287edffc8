"""Pure arithmetic of memory estimates: extrapolate peaks in batch size, and what fits.

Peak memory of a training step is close to affine in the batch size: weights, gradients and
optimizer state do not depend on it, activations grow linearly with it. Two or more measured
points give the line; the largest batch that fits follows from the device capacity.
"""

from __future__ import annotations

from collections.abc import Sequence


def fit_affine(points: Sequence[tuple[int, int]]) -> tuple[float, float]:
    """Least-squares ``peak = fixed + per_sample * batch`` through ``(batch, peak_bytes)`` points.

    Returns ``(fixed_bytes, per_sample_bytes)``. Needs at least two distinct batch sizes.
    """
    if len({b for b, _ in points}) < 2:
        raise ValueError("need peaks at two or more different batch sizes to extrapolate")
    n = len(points)
    mean_b = sum(b for b, _ in points) / n
    mean_p = sum(p for _, p in points) / n
    var = sum((b - mean_b) ** 2 for b, _ in points)
    slope = sum((b - mean_b) * (p - mean_p) for b, p in points) / var
    slope = max(slope, 0.0)  # memory never shrinks with a bigger batch; noise can say otherwise
    return mean_p - slope * mean_b, slope


def peak_at(fixed_bytes: float, per_sample_bytes: float, batch_size: int) -> int:
    """The estimated peak at ``batch_size``."""
    return int(round(fixed_bytes + per_sample_bytes * batch_size))


def max_batch_that_fits(
    fixed_bytes: float, per_sample_bytes: float, capacity_bytes: int, *, margin: float = 0.1
) -> int | None:
    """Largest batch whose estimated peak stays under ``capacity * (1 - margin)``.

    ``None`` when the batch-independent part alone does not fit, or when the per-sample cost is
    zero (no limit from memory).
    """
    if not 0.0 <= margin < 1.0:
        raise ValueError(f"margin {margin} must be in [0, 1)")
    budget = capacity_bytes * (1.0 - margin) - fixed_bytes
    if budget < per_sample_bytes or per_sample_bytes <= 0:
        return None
    return int(budget / per_sample_bytes + 1e-9)  # epsilon: 7999.999.. samples is 8000


def optimizer_state_bytes(optimizer: str, param_bytes_fp32: int) -> int:
    """Bytes of optimizer state for fp32 master parameters of ``param_bytes_fp32`` bytes.

    Adam/AdamW keep two fp32 moments (2x); SGD with momentum one buffer (1x); plain SGD none.
    """
    name = optimizer.lower()
    if name in ("adam", "adamw", "fusedadam", "lamb"):
        return 2 * param_bytes_fp32
    if name in ("sgd_momentum", "rmsprop", "adagrad", "lion"):
        return param_bytes_fp32
    if name == "sgd":
        return 0
    raise ValueError(f"unknown optimizer {optimizer!r}: use adamw, adam, sgd, sgd_momentum, rmsprop")
