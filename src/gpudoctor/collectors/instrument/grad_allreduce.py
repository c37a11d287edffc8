"""A gradient all-reduced by hand on a DDP model: reduced twice.

``DistributedDataParallel`` averages every gradient during ``backward()``. Scripts ported from
hand-written data parallelism (or copied from a tutorial that predates DDP) still loop over the
parameters after it, ``dist.all_reduce(p.grad); p.grad /= world_size``: the same bytes cross the
network a second time and, when the loop divides by the world size once more, the gradient is
scaled down. The wrapper of ``torch.distributed.all_reduce`` counts calls made outside
``backward()`` (DDP's own communication hooks run inside it, on its buckets) on a tensor that is
the ``.grad`` of a parameter of a DDP model, and the bytes they carry: ``S.seen.manual_grad_allreduce``
as ``[calls, bytes, first step]``. Costs a set lookup per call, the set rebuilt once per backward.
"""

from __future__ import annotations

from typing import Any

from gpudoctor.collectors.instrument.state import S


class _Grads:
    def __init__(self) -> None:
        self.when: tuple[int, int] = (-1, -1)  # (step, backward calls in it) the set was built at
        self.keys: set[tuple[int, tuple[int, ...]]] = set()


_G = _Grads()


def _grad_keys(ddp: Any) -> set[tuple[int, tuple[int, ...]]]:
    """The gradients' (address, shape), rebuilt after each backward (set_to_none makes new ones)."""
    when = (S.step, S.backwards)
    if _G.when != when:
        _G.when = when
        _G.keys = {(p.grad.data_ptr(), tuple(p.grad.shape)) for p in ddp.module.parameters()
                   if p.grad is not None}
    return _G.keys


def _in_backward(torch: Any) -> bool:
    current = getattr(torch._C, "_current_graph_task_id", None)
    return current is not None and current() != -1


def note(torch: Any, tensor: Any) -> None:
    """Count ``tensor`` if it is a DDP model's parameter gradient reduced outside backward."""
    ddp = S.seen.ddp
    if ddp is None or S.quiet or not isinstance(tensor, torch.Tensor) or _in_backward(torch):
        return
    if (tensor.data_ptr(), tuple(tensor.shape)) not in _grad_keys(ddp):
        return
    calls, nbytes, first = S.seen.manual_grad_allreduce or (0, 0, S.step)
    S.seen.manual_grad_allreduce = (calls + 1, nbytes + tensor.numel() * tensor.element_size(), first)


def install(torch: Any) -> None:
    """Wrap ``torch.distributed.all_reduce`` (also reached as ``dist.all_reduce`` after import)."""
    import torch.distributed as dist

    if not dist.is_available():
        return
    orig = dist.all_reduce

    def all_reduce(tensor, *args, **kwargs):
        try:
            note(torch, tensor)
        except Exception:  # noqa: BLE001 - a probe never breaks the script's collective
            pass
        return orig(tensor, *args, **kwargs)

    all_reduce.__doc__ = orig.__doc__
    all_reduce.__wrapped__ = orig
    dist.all_reduce = all_reduce


__all__ = ["install", "note"]
