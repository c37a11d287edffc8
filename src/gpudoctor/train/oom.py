"""Out-of-memory recovery by micro-batch halving (Composer's auto-microbatching, done plainly).

When a step raises ``torch.OutOfMemoryError`` the loop frees what the failed attempt held, doubles
``split`` (each loader batch is cut into ``split`` micro-batches, so the micro-batch halves while the
effective batch stays the same through accumulation) and retries the same batches. Under torchrun
every rank must take the same decision, or the ranks' collectives stop matching and the job hangs:
the loop all-reduces an OOM flag (MAX) after each attempt. The error is classified by its type,
never by matching message strings.
"""

from __future__ import annotations

import gc
import warnings

import torch


def is_oom(exc: BaseException) -> bool:
    """True for an out-of-memory error from any device allocator."""
    return isinstance(exc, torch.OutOfMemoryError)


def free_memory(optimizer: torch.optim.Optimizer) -> None:
    """Drop what a failed attempt holds: gradients, unreachable activations, cached blocks."""
    optimizer.zero_grad(set_to_none=True)
    gc.collect()  # the traceback's frames hold activations until collected
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()  # only here, after an OOM: in the loop it would only slow steps


class MicroBatchSplit:
    """How many micro-batches each loader batch is cut into, and when to give up.

    Args:
        batch_size: samples per loader batch (per rank).
        min_micro_batch: do not split below this many samples.
    """

    def __init__(self, batch_size: int | None, min_micro_batch: int) -> None:
        self.batch_size = batch_size
        self.min_micro_batch = min_micro_batch
        self.split = 1

    def halve(self, observed: int | None = None) -> None:
        """Double the split after an OOM; raise when the micro-batch would go below the minimum.

        ``observed``: the failed batch's size, used when the loader's batch size is unknown (an
        iterable of ready-made batches has no ``batch_size``).
        """
        size = self.batch_size or observed or 0
        if size // (self.split * 2) < self.min_micro_batch:
            raise torch.OutOfMemoryError(
                f"out of memory even at a micro-batch of {size // self.split} samples "
                f"(robust.min_micro_batch={self.min_micro_batch}); shrink the model's memory "
                "(activation checkpointing, bf16, FSDP) or lower robust.min_micro_batch"
            )
        self.split *= 2
        warnings.warn(
            f"out of memory: retrying with micro-batch {size // self.split} "
            f"({self.split} micro-steps per loader batch; the effective batch is unchanged)",
            RuntimeWarning,
            stacklevel=2,
        )
