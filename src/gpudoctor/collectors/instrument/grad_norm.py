"""The global gradient norm, for free: the value the script's ``clip_grad_norm_`` returns.

``torch.nn.utils.clip_grad_norm_`` already computes the total norm of every gradient (one
reduction on the device) and returns it as a tensor. The wrapper keeps that tensor; the step
boundary reads it lazily like the loss (:mod:`~gpudoctor.collectors.instrument.lazy`), so
recording it adds no host-device sync and no computation. A script that does not clip records
no norm (``StepRecord.grad_norm`` stays ``None``). With gradient accumulation the last call of
the step counts.
"""

from __future__ import annotations

from typing import Any

from gpudoctor.collectors.instrument.state import S


def install(torch: Any, is_compiling: Any) -> None:
    """Wrap ``clip_grad_norm_`` where scripts look it up: ``torch.nn.utils`` and its module
    ``torch.nn.utils.clip_grad`` (a ``from ... import`` after the hook gets the wrapper)."""
    import torch.nn.utils.clip_grad as clip_grad

    orig = clip_grad.clip_grad_norm_

    def clip_grad_norm_(*args, **kwargs):
        norm = orig(*args, **kwargs)
        if not S.quiet and not is_compiling() and isinstance(norm, torch.Tensor):
            S.last_grad_norm = norm
        return norm

    clip_grad_norm_.__doc__ = orig.__doc__
    clip_grad_norm_.__wrapped__ = orig
    clip_grad.clip_grad_norm_ = clip_grad_norm_
    torch.nn.utils.clip_grad_norm_ = clip_grad_norm_


__all__ = ["install"]
