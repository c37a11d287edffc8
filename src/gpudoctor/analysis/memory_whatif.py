"""What a change to training would do to its memory: the arithmetic (pure).

The measured inputs come from :mod:`gpudoctor.memory.whatif` (the same model the estimate ran);
each entry of :data:`OPTIMIZER_STATE` says where its sizes come from.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# Sizes of optimizer state, with where they come from (the knowledge, as data).
OPTIMIZER_STATE = {
    "adamw": "two fp32 moments per parameter: 8 bytes per element (torch.optim.AdamW)",
    "adafactor": ("factored second moment, no first moment (torch.optim.Adafactor): a tensor of 2+ "
                  "dimensions keeps a row and a column vector over its last two dimensions, "
                  "prod(shape[:-1]) + prod(shape[:-2]) * shape[-1] fp32 values; a 1-D tensor a full "
                  "fp32 vector"),
    "adamw8bit": ("bitsandbytes AdamW8bit: two uint8 states (1 byte per element each) plus an fp32 "
                  "absmax per block of 256 elements for each; tensors under 4,096 elements "
                  "(min_8bit_size) keep two fp32 moments"),
}
BNB_BLOCK = 256  # bitsandbytes Optimizer8bit.init_state: blocks = ceil(n / 256) when block_wise
BNB_MIN_8BIT = 4096  # bitsandbytes Optimizer8bit default min_8bit_size: smaller tensors stay 32-bit


def adafactor_state_bytes(shapes: Iterable[Sequence[int]]) -> int:
    total = 0
    for shape in shapes:
        shape = tuple(shape)
        if len(shape) >= 2:
            total += 4 * (math.prod(shape[:-1]) + math.prod(shape[:-2]) * shape[-1])
        else:
            total += 4 * math.prod(shape)
    return total


def adamw8bit_state_bytes(numels: Iterable[int]) -> int:
    total = 0
    for n in numels:
        if n < BNB_MIN_8BIT:
            total += 8 * n
        else:
            total += 2 * (n + 4 * math.ceil(n / BNB_BLOCK))
    return total


@dataclass(frozen=True)
class CheckpointSaved:
    """Bytes autograd saves in one forward at one batch size, split by checkpointable block."""

    batch_size: int
    total_bytes: int  # everything saved (no checkpointing)
    outside_bytes: int  # saved outside every block
    block_input_bytes: int  # the blocks' inputs (what checkpointing keeps of each block)
    largest_block_bytes: int  # the largest one block saves (recomputed during its backward)

    @property
    def checkpointed_bytes(self) -> int:
        """What stays saved between forward and backward with every block checkpointed, plus one
        block's recomputation during backward (the transient that adds to the peak)."""
        return self.outside_bytes + self.block_input_bytes + self.largest_block_bytes


def micro_batch_plan(batch_size: int, micro: int) -> tuple[int, int]:
    """``(micro_batch, accumulation_steps)`` giving at least ``batch_size`` samples per update."""
    if micro < 1:
        raise ValueError(f"micro-batch={micro}: must be at least 1")
    micro = min(micro, batch_size)
    return micro, math.ceil(batch_size / micro)
