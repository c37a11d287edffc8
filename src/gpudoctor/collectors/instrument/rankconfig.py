"""Build :class:`~gpudoctor.records.run.RankConfig` from what the probes saw in-process.

All reads are host-side flags and tensor metadata (device, dtype, numel): no device sync.
The probes hold the user's optimizer, DDP module and loaders weakly
(:mod:`~gpudoctor.collectors.instrument.state`): what is gone by the time the config is written
again at the end is taken from the config written after the first step (``state.config``).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from gpudoctor.records.run import DdpConfig, LoaderConfig, RankConfig


# the fields read from the optimizer's parameters, and from the DDP/DataParallel module
_OPTIMIZER_FIELDS = ("device", "cuda_device_index", "channels_last", "param_count", "param_dtypes",
                     "optimizer", "optimizer_fused", "optimizer_foreach", "device_name",
                     "gpu_total_memory_bytes", "cuda_device_uuid", "knob_notes")


def capture(state: Any) -> RankConfig:
    """Read the current training setup of this process; for the user objects garbage-collected
    since the last written config (``state.config``), that config's fields."""
    config = _read(state)
    before = state.config
    if before is None:
        return config
    keep: dict[str, Any] = {}
    if state.seen.optimizer is None and before.param_count is not None:
        keep.update({name: getattr(before, name) for name in _OPTIMIZER_FIELDS})
    if config.ddp is None and before.ddp is not None:
        keep["ddp"] = before.ddp
    alive = {(lo.dataset, lo.batch_size, lo.sampler) for lo in config.loaders}
    gone = tuple(lo for lo in before.loaders if (lo.dataset, lo.batch_size, lo.sampler) not in alive)
    if gone:
        keep["loaders"] = config.loaders + gone
    return dataclasses.replace(config, **keep) if keep else config


def _read(state: Any) -> RankConfig:
    """The training setup from the objects the probes can still reach."""
    import torch

    from gpudoctor.core.dist import dist_env

    try:
        env = dist_env()
        rank, local_rank, world = env.rank, env.local_rank, env.world_size
    except ValueError:
        rank, local_rank, world = state.rank, 0, 1
    backend = ""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
        backend = str(torch.distributed.get_backend())
        state.seen.dist = (rank, world, backend)
    elif state.seen.dist is not None:  # written again at the end, after destroy_process_group
        rank, world, backend = state.seen.dist
    optimizer = state.seen.optimizer
    params = _params(optimizer)
    device = params[0].device if params else torch.device("cpu")
    cuda_index = device.index if device.type == "cuda" else None
    if cuda_index is None and device.type == "cuda":
        cuda_index = torch.cuda.current_device()
    fields: dict[str, Any] = {}
    if cuda_index is not None:
        props = torch.cuda.get_device_properties(cuda_index)
        fields.update(device_name=props.name, gpu_total_memory_bytes=int(props.total_memory))
        uuid = getattr(props, "uuid", None)
        if uuid is not None:
            fields["cuda_device_uuid"] = str(uuid)
    ddp, kind = state.seen.ddp, _sharding(params)
    return RankConfig(
        rank=rank,
        local_rank=local_rank,
        world_size=world,
        pid=os.getpid(),
        device=f"cuda:{cuda_index}" if cuda_index is not None else device.type,
        cuda_device_index=cuda_index,
        torch_version=torch.__version__,
        cuda_version=torch.version.cuda,
        cudnn_version=torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        cudnn_benchmark=bool(torch.backends.cudnn.benchmark),
        cudnn_deterministic=bool(torch.backends.cudnn.deterministic),
        tf32_matmul=bool(torch.backends.cuda.matmul.allow_tf32),
        tf32_cudnn=bool(torch.backends.cudnn.allow_tf32),
        float32_matmul_precision=torch.get_float32_matmul_precision(),
        autocast_dtypes=tuple(sorted(state.seen.autocast)),
        grad_scaler=state.seen.grad_scaler,
        compiled=state.seen.compiled,
        channels_last=_channels_last(params, torch),
        ddp=_ddp_config(ddp, state) if ddp is not None else (DdpConfig(kind=kind) if kind else _dp_config(state)),
        param_count=sum(int(p.numel()) for p in params) if params else None,
        param_dtypes=tuple(sorted({str(p.dtype).removeprefix("torch.") for p in params})),
        optimizer=type(optimizer).__name__ if optimizer is not None else "",
        optimizer_fused=_flag(optimizer, "fused"),
        optimizer_foreach=_flag(optimizer, "foreach"),
        loaders=tuple(_loader_config(dl, state) for dl in list(state.loaders)),
        backend=backend,
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", os.environ.get("PYTORCH_ALLOC_CONF", "")),
        usable_cpus=_usable_cpus(),
        local_world_size=_local_world_size(world),
        knob_notes=_knob_notes(cuda_index, device),
        **fields,
    )


def _usable_cpus() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count()


def _local_world_size(world: int) -> int:
    """Ranks on this node: torchrun's ``LOCAL_WORLD_SIZE``, else all ranks (one node)."""
    try:
        return int(os.environ.get("LOCAL_WORLD_SIZE", world))
    except ValueError:
        return world


def _knob_notes(cuda_index: int | None, device: Any) -> tuple[str, ...]:
    from gpudoctor.collectors.instrument import inject

    if not inject.I.knobs:
        return ()
    return inject.notes(f"cuda:{cuda_index}" if cuda_index is not None else device.type)


def _params(optimizer: Any) -> list:
    if optimizer is None:
        return []
    return [p for group in optimizer.param_groups for p in group["params"]]


def _flag(optimizer: Any, name: str) -> bool | None:
    if optimizer is None:
        return None
    value = optimizer.defaults.get(name)
    return None if value is None else bool(value)


def _sharding(params: list) -> str:
    """Recognise FSDP from the parameters: DTensor (FSDP2 ``fully_shard``) or flat parameters."""
    for p in params[:4]:
        if type(p).__name__ == "DTensor" or type(getattr(p, "data", None)).__name__ == "DTensor":
            return "fsdp2"
        if getattr(p, "_is_flat_param", False) or type(p).__name__ == "FlatParameter":
            return "fsdp"
    return ""


def _channels_last(params: list, torch: Any) -> bool | None:
    four_d = [p for p in params if p.dim() == 4]
    if not four_d:
        return None
    for p in four_d:
        if not p.is_contiguous() and p.is_contiguous(memory_format=torch.channels_last):
            return True
    return False


def _ddp_config(ddp: Any, state: Any) -> DdpConfig:
    cap = getattr(ddp, "bucket_bytes_cap", None)
    return DdpConfig(
        kind="ddp",
        device_ids=tuple(int(i) for i in (getattr(ddp, "device_ids", None) or ())),
        bucket_cap_mb=cap / (1024 * 1024) if cap else None,
        find_unused_parameters=getattr(ddp, "find_unused_parameters", None),
        gradient_as_bucket_view=getattr(ddp, "gradient_as_bucket_view", None),
        static_graph=getattr(ddp, "static_graph", None),
        comm_hook=state.seen.comm_hook,
        **_manual_allreduce(state),
    )


def _manual_allreduce(state: Any) -> dict[str, Any]:
    calls, nbytes, first = state.seen.manual_grad_allreduce or (0, 0, None)
    return {"manual_grad_allreduces": calls, "manual_grad_allreduce_bytes": nbytes,
            "manual_grad_allreduce_first_step": first}


def _dp_config(state: Any) -> DdpConfig | None:
    dp = state.seen.dp
    if dp is None:
        return None
    return DdpConfig(kind="dp", device_ids=tuple(int(i) for i in (getattr(dp, "device_ids", None) or ())))


def _loader_config(loader: Any, state: Any) -> LoaderConfig:
    sampler = getattr(loader, "sampler", None)
    batch_sampler = getattr(loader, "batch_sampler", None)
    if sampler is None and batch_sampler is not None:
        sampler = getattr(batch_sampler, "sampler", None)
    is_dist = type(sampler).__name__ == "DistributedSampler" or (
        sampler is not None and hasattr(sampler, "num_replicas") and hasattr(sampler, "set_epoch")
    )
    try:
        length = len(loader.dataset)
    except Exception:  # noqa: BLE001 - iterable datasets have no length
        length = None
    workers = int(loader.num_workers)
    counts = state.loader_counts.get(loader)
    return LoaderConfig(
        num_workers=workers,
        pin_memory=bool(loader.pin_memory),
        persistent_workers=bool(getattr(loader, "persistent_workers", False)),
        prefetch_factor=getattr(loader, "prefetch_factor", None) if workers > 0 else None,
        batch_size=loader.batch_size,
        drop_last=bool(loader.drop_last),
        sampler=type(sampler).__name__ if sampler is not None else "",
        dataset=type(loader.dataset).__name__,
        dataset_len=length,
        set_epoch_called=bool(getattr(sampler, "_gpudoctor_set_epoch", False)) if is_dist else None,
        epochs_started=counts.epochs if counts is not None else 0,
        batches=counts.batches if counts is not None else 0,
        pin_memory_device=str(getattr(loader, "pin_memory_device", "") or ""),
    )
