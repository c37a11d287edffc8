"""The loader side of an epoch: what ``fit`` turns its data into, reshuffling, and starting mid-epoch."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from gpudoctor.core.dist import DistEnv
from gpudoctor.train.config import TrainConfig
from gpudoctor.train.data import ResumableSampler, fast_loader
from gpudoctor.train.prefetch import CudaPrefetcher


def prepare_loader(data: Iterable | Dataset, config: TrainConfig, env: DistEnv, device: torch.device) -> Iterable:
    """A Dataset becomes a ``fast_loader``; a CUDA DataLoader gets the stream prefetcher."""
    if isinstance(data, Dataset) and not isinstance(data, (DataLoader, IterableDataset)) \
            and not hasattr(data, "__iter__"):
        if config.batch_size is None:
            raise ValueError("fit() was given a Dataset: set TrainConfig.batch_size (per device)")
        data = fast_loader(data, config.batch_size, seed=config.seed or 0, env=env)
    if env.world_size > 1 and isinstance(data, DataLoader) and not hasattr(data.sampler, "set_epoch"):
        warnings.warn("under torchrun this DataLoader gives every rank the same batches; use fast_loader "
                      "or a DistributedSampler", RuntimeWarning, stacklevel=4)
    if device.type == "cuda" and isinstance(data, DataLoader):
        return CudaPrefetcher(data, device)
    return data


def set_epoch(loader: Iterable, epoch: int) -> None:
    """Tell the loader (or its sampler: ``DistributedSampler`` & co.) which epoch starts: it reshuffles."""
    if hasattr(loader, "set_epoch"):
        loader.set_epoch(epoch)
    elif hasattr(getattr(loader, "sampler", None), "set_epoch"):
        loader.sampler.set_epoch(epoch)


def iter_from(loader: Iterable, skip: int) -> Iterator:
    """An iterator over ``loader`` starting at batch ``skip`` (without reloading when possible)."""
    if skip and hasattr(loader, "set_start_batch"):
        loader.set_start_batch(skip)
        skip = 0
    elif skip and isinstance(getattr(loader, "sampler", None), ResumableSampler):
        loader.sampler.set_start(skip * loader.batch_size)
        skip = 0
    it = iter(loader)
    for _ in range(skip):  # a loader we cannot fast-forward: replay (same order, same RNG)
        next(it)
    return it


def loader_len(loader: Iterable) -> int:
    """Batches per epoch, or 0 for a loader without a length (an iterable dataset, a generator)."""
    try:
        return len(loader)  # type: ignore[arg-type]
    except TypeError:
        return 0
