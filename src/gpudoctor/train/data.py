"""Getting batches to the GPU: ``move_to_device``, ``fast_loader`` and a resumable sampler.

The loader defaults are the ones the seeds' troubleshooting sections keep returning to: worker
processes sized from the CPUs this rank may use, pinned memory (H2D pinned ran 55.5 vs 21.4 GB/s
pageable on an H200), persistent workers (no re-fork each epoch), a bounded prefetch (pinned memory
is not free: seed 003 warns that many workers x a large prefetch can exhaust host RAM), and a
``DistributedSampler`` whose ``set_epoch`` the engine calls every epoch.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from gpudoctor.core.dist import DistEnv, dist_env


def move_to_device(batch: Any, device: torch.device, *, non_blocking: bool = True) -> Any:
    """Move every tensor in a nested batch (dicts, lists, tuples, named tuples, dataclasses).

    ``non_blocking=True`` only overlaps with compute when the source is pinned; from pageable
    memory the copy is synchronous anyway. Non-tensor leaves are returned unchanged.
    """
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, dict):
        return type(batch)({k: move_to_device(v, device, non_blocking=non_blocking) for k, v in batch.items()})
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # named tuple
        return type(batch)(*(move_to_device(v, device, non_blocking=non_blocking) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(move_to_device(v, device, non_blocking=non_blocking) for v in batch)
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        changes = {
            f.name: move_to_device(getattr(batch, f.name), device, non_blocking=non_blocking)
            for f in dataclasses.fields(batch)
            if f.init
        }
        return dataclasses.replace(batch, **changes)
    return batch


def batch_size_of(batch: Any) -> int | None:
    """The first dimension of the first tensor found in ``batch`` (None if there is none)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else None
    if isinstance(batch, dict):
        batch = list(batch.values())
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        batch = [getattr(batch, f.name) for f in dataclasses.fields(batch)]
    if isinstance(batch, (list, tuple)):
        for item in batch:
            size = batch_size_of(item)
            if size is not None:
                return size
    return None


def split_batch(batch: Any, chunks: int) -> list[Any]:
    """Split every tensor of a nested batch along dim 0 into ``chunks`` micro-batches."""
    if chunks == 1:
        return [batch]
    if isinstance(batch, torch.Tensor):
        return list(batch.chunk(chunks))
    if isinstance(batch, dict):
        parts = {k: split_batch(v, chunks) for k, v in batch.items()}
        n = min(len(p) for p in parts.values())
        return [type(batch)({k: p[i] for k, p in parts.items()}) for i in range(n)]
    if isinstance(batch, (list, tuple)):
        parts = [split_batch(v, chunks) for v in batch]
        n = min(len(p) for p in parts)
        rows = [[p[i] for p in parts] for i in range(n)]
        if hasattr(batch, "_fields"):
            return [type(batch)(*r) for r in rows]
        return [type(batch)(r) for r in rows]
    return [batch] * chunks


def default_num_workers(env: DistEnv | None = None) -> int:
    """Worker processes per rank: the CPUs this process may use, shared by the local ranks,
    one left for the training process itself; at least 1, at most 16."""
    env = env or dist_env()
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS/Windows
        cpus = os.cpu_count() or 1
    per_rank = cpus // max(env.local_world_size, 1)
    return max(1, min(16, per_rank - 1))


class ResumableSampler(DistributedSampler):
    """``DistributedSampler`` (also for one process) that can start mid-epoch.

    The order depends only on ``seed`` and the epoch, so a resumed run sees the same samples;
    ``set_start(n)`` skips the first ``n`` samples of this rank for the next epoch only.
    """

    def __init__(self, dataset: Dataset, *, shuffle: bool = True, seed: int = 0, drop_last: bool = False,
                 env: DistEnv | None = None) -> None:
        env = env or dist_env()
        super().__init__(dataset, num_replicas=env.world_size, rank=env.rank, shuffle=shuffle, seed=seed,
                         drop_last=drop_last)
        self._start = 0

    def set_start(self, samples: int) -> None:
        self._start = samples

    def __iter__(self) -> Iterator[int]:
        indices = list(super().__iter__())[self._start:]
        self._start = 0
        return iter(indices)

    def __len__(self) -> int:
        return self.num_samples - self._start


def fast_loader(
    dataset: Dataset,
    batch_size: int,
    *,
    shuffle: bool = True,
    drop_last: bool = True,
    seed: int = 0,
    num_workers: int | None = None,
    prefetch_factor: int = 4,
    pin_memory: bool | None = None,
    collate_fn: Callable | None = None,
    env: DistEnv | None = None,
    multiprocessing_context: str | None = None,
) -> DataLoader:
    """A ``DataLoader`` with the settings a GPU needs, sharded over torchrun's ranks.

    Args:
        dataset: a map-style dataset.
        batch_size: samples per rank per loader batch (the per-GPU batch).
        shuffle: reshuffle every epoch (the engine calls ``sampler.set_epoch``).
        drop_last: drop a short last batch (keeps every step's shape the same for cudnn/compile).
        seed: the shuffle seed, identical on every rank.
        num_workers: ``None`` picks :func:`default_num_workers`; 0 loads in the main process.
        prefetch_factor: batches each worker keeps ready.
        pin_memory: ``None``: pin when CUDA is available.
        collate_fn: passed to ``DataLoader``.
        env: the torchrun environment (read from the process environment when omitted).
        multiprocessing_context: how workers start: ``None`` (the platform default, ``fork`` on
            Linux), ``"fork"``, ``"spawn"`` or ``"forkserver"``. ``forkserver``/``spawn`` workers
            do not inherit the parent's memory (a large dataset object, CUDA state) at the cost of
            pickling the dataset once per worker; ``gpudoctor tune loader`` measures forkserver.
    """
    if multiprocessing_context not in (None, "fork", "spawn", "forkserver"):
        raise ValueError(f"multiprocessing_context={multiprocessing_context!r}: use None, 'fork', 'spawn' "
                         "or 'forkserver'")
    env = env or dist_env()
    workers = default_num_workers(env) if num_workers is None else num_workers
    sampler = ResumableSampler(dataset, shuffle=shuffle, seed=seed, drop_last=drop_last, env=env)
    extra: dict[str, Any] = {}
    if workers > 0:
        extra = {"persistent_workers": True, "prefetch_factor": prefetch_factor,
                 "multiprocessing_context": multiprocessing_context}
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=workers,
        pin_memory=torch.cuda.is_available() if pin_memory is None else pin_memory,
        drop_last=drop_last,
        collate_fn=collate_fn,
        **extra,
    )
