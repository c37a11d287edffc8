"""Parallelism policy: none, DDP or FSDP2 over the ranks torchrun started.

Order of setup (seed 002 §3.4): ``set_device`` -> ``init_process_group(device_id=..., timeout=...)``
-> ``model.to(device)`` -> wrap. Gradient accumulation turns gradient sync off on the non-final
micro-steps (``no_sync`` for DDP, ``set_requires_gradient_sync`` for FSDP2): syncing every micro-step
costs more than 2x with accumulation (Accelerate's docs).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.distributed as dist

from gpudoctor.core.dist import DistEnv, destroy_distributed, init_distributed
from gpudoctor.train.config import ParallelConfig


def sync_batchnorm(model: torch.nn.Module, config: ParallelConfig, strategy: str) -> torch.nn.Module:
    """``parallel.sync_batchnorm`` under DDP/FSDP: every BatchNorm becomes a ``SyncBatchNorm``
    (statistics over the global batch; it needs CUDA tensors at run time). A single process
    keeps its BatchNorm: there is nothing to synchronise."""
    if config.sync_batchnorm and strategy in ("ddp", "fsdp"):
        return torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    return model


def resolve_strategy(config: ParallelConfig, env: DistEnv) -> str:
    """``auto`` -> ``ddp`` under torchrun with more than one rank, else ``none``."""
    if config.strategy == "auto":
        return "ddp" if env.is_distributed else "none"
    if config.strategy in ("ddp", "fsdp") and not env.is_distributed:
        return "none"  # one process: wrapping would only add overhead
    return config.strategy


class Parallel:
    """Wraps the model and answers the loop's few distributed questions.

    Example::

        parallel = Parallel(ParallelConfig(), dist_env(), device)   # joins the process group
        model = parallel.wrap(model)
        with parallel.no_sync(model, last_micro_step=False):
            loss.backward()
        parallel.close()                                            # leaves it (if it joined it)
    """

    def __init__(self, config: ParallelConfig, env: DistEnv, device: torch.device) -> None:
        self.config = config
        self.env = env
        self.device = device
        self.strategy = resolve_strategy(config, env)
        # set_device first, then the group; a group the caller made is the caller's to end
        self.owns_group = init_distributed(env, device, timeout_s=config.timeout_s)

    def close(self) -> None:
        """Leave the process group if this object joined it (a group the caller made is the caller's
        to end), the way ``destroy_distributed`` does: barrier, destroy, and under gloo an idle wait."""
        if self.owns_group:
            self.owns_group = False
            destroy_distributed()

    @property
    def world_size(self) -> int:
        return self.env.world_size if self.strategy != "none" else 1

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """Move ``model`` to the device and wrap it for the strategy."""
        model = sync_batchnorm(model, self.config, self.strategy).to(self.device)
        if self.strategy == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP

            ddp = DDP(
                model,
                device_ids=[self.device.index] if self.device.type == "cuda" else None,
                bucket_cap_mb=self.config.bucket_cap_mb,
                gradient_as_bucket_view=self.config.gradient_as_bucket_view,
                static_graph=self.config.static_graph,
                find_unused_parameters=self.config.find_unused_parameters,
            )
            register_comm_hook(ddp, self.config.comm_hook)
            return ddp
        if self.strategy == "fsdp":
            from torch.distributed.fsdp import fully_shard

            names = set(self.config.fsdp_shard_modules)
            for module in list(model.modules())[1:]:
                if type(module).__name__ in names:
                    fully_shard(module)
            fully_shard(model)
        return model

    def no_sync(self, model: torch.nn.Module, *, last_micro_step: bool) -> contextlib.AbstractContextManager:
        """A context for one micro-step's backward: gradient sync only on the last micro-step."""
        if last_micro_step or self.strategy == "none":
            if self.strategy == "fsdp":
                model.set_requires_gradient_sync(True)
            return contextlib.nullcontext()
        if self.strategy == "ddp":
            return model.no_sync()
        model.set_requires_gradient_sync(False)  # FSDP2: reduce-scatter only on the last micro-step
        return contextlib.nullcontext()

    def store(self) -> Any:
        """The process group's key-value store (a host-side TCP store: no device work)."""
        from torch.distributed import distributed_c10d

        return distributed_c10d._get_default_store()

    def all_reduce_max(self, value: int) -> int:
        """The largest ``value`` over all ranks (a collective and a host sync point)."""
        if self.world_size == 1:
            return value
        flag = torch.tensor([value], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return int(flag.item())

    def mean(self, tensor: torch.Tensor) -> torch.Tensor:
        """Average a tensor over the ranks (a collective; no host sync by itself)."""
        if self.world_size == 1:
            return tensor
        tensor = tensor.clone()
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor / self.world_size

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order (a collective)."""
        if not dist.is_initialized():
            return [obj]
        out: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        if dist.is_initialized():
            dist.barrier()


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The user's module under ``torch.compile`` (``_orig_mod``) and DDP (``module``) wrappers."""
    while True:
        if hasattr(model, "_orig_mod"):
            model = model._orig_mod
        elif isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module
        else:
            return model


def register_comm_hook(model: torch.nn.Module, name: str) -> None:
    """Register PyTorch's ``fp16``/``bf16`` gradient compression hook on a DDP model (``none``:
    nothing; a model that is not DDP — one process — has no gradient communication)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    if name == "none" or not isinstance(model, DistributedDataParallel):
        return
    hooks = {"fp16": default_hooks.fp16_compress_hook, "bf16": default_hooks.bf16_compress_hook}
    model.register_comm_hook(None, hooks[name])
