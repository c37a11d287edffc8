"""A CUDA-stream prefetcher: the next batch's host-to-device copy overlaps this batch's compute.

How the streams are kept honest: the copy runs on a side stream; before the compute stream uses a
batch it waits for that stream (``wait_stream``), and each tensor is marked with
``record_stream(compute_stream)`` so the caching allocator does not hand its memory to another
tensor while the compute stream may still read it. The source must be pinned for the copy to be
asynchronous (``fast_loader`` pins). On the CPU it only moves batches.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch

from gpudoctor.train.data import move_to_device


def _record_stream(batch: Any, stream: torch.cuda.Stream) -> None:
    if isinstance(batch, torch.Tensor):
        if batch.is_cuda:
            batch.record_stream(stream)
    elif isinstance(batch, dict):
        for v in batch.values():
            _record_stream(v, stream)
    elif isinstance(batch, (list, tuple)):
        for v in batch:
            _record_stream(v, stream)
    elif hasattr(batch, "__dataclass_fields__"):
        for name in batch.__dataclass_fields__:
            _record_stream(getattr(batch, name), stream)


class CudaPrefetcher:
    """Iterate ``loader`` with batches already on ``device``, one batch copied ahead.

    Example::

        for x, y in CudaPrefetcher(loader, device):
            loss = loss_fn(model(x), y)

    ``set_epoch``/``set_start``/``sampler`` are forwarded so the engine can treat it as the loader.
    """

    def __init__(self, loader: Iterable, device: torch.device) -> None:
        self.loader = loader
        self.device = device
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:  # sampler, dataset, batch_size, set_epoch, ...
        return getattr(self.__dict__["loader"], name)

    def _copy(self, batch: Any) -> Any:
        if self.stream is None:
            return move_to_device(batch, self.device)
        with torch.cuda.stream(self.stream):
            return move_to_device(batch, self.device, non_blocking=True)

    def __iter__(self) -> Iterator[Any]:
        it = iter(self.loader)
        try:
            nxt = self._copy(next(it))
        except StopIteration:
            return
        while True:
            batch = nxt
            if self.stream is not None:
                compute = torch.cuda.current_stream(self.device)
                compute.wait_stream(self.stream)  # GPU-side wait: no host sync
                _record_stream(batch, compute)
            try:
                nxt = self._copy(next(it))  # issued now, runs while the caller computes on `batch`
            except StopIteration:
                yield batch
                return
            yield batch
