"""``memory estimate --what-if``: activation checkpointing, Adafactor, 8-bit AdamW, micro-batches.

Each answer starts from the estimate of the same model (:func:`estimate_memory`) and changes one
part of it:

* ``checkpointing`` — the model's repeated blocks (the class with the most instances among
  modules that hold children and parameters: ``Bottleneck`` in a ResNet, the transformer
  ``Block``) checkpointed. One forward is run at each probe batch with a hook on the tensors
  autograd saves, each attributed to the block it was saved in: with checkpointing, what stays
  saved is everything outside the blocks plus each block's input, and during backward one block
  is recomputed at a time (its saved tensors, the largest block counted). The ratio of that to
  everything saved scales the estimate's activations (measured on a GPU, saved tensors on a CPU);
* ``adafactor`` / ``adamw8bit`` — the optimizer state computed from the parameters' shapes
  (:data:`gpudoctor.analysis.memory_whatif.OPTIMIZER_STATE` says how);
* ``micro-batch=N`` — activations of N samples instead of the batch, the same batch per update
  through ``ceil(batch / N)`` accumulation steps.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from gpudoctor.analysis import memory_model
from gpudoctor.analysis.memory_whatif import (
    OPTIMIZER_STATE,
    CheckpointSaved,
    adafactor_state_bytes,
    adamw8bit_state_bytes,
    micro_batch_plan,
)
from gpudoctor.records.memory import MemoryEstimate, WhatIf
from gpudoctor.records.units import human_bytes

CHANGES = ("checkpointing", "adafactor", "adamw8bit", "micro-batch=N")


def parse_what_if(text: str) -> tuple[str, int | None]:
    """``"micro-batch=8"`` -> ``("micro-batch", 8)``; the others -> ``(name, None)``.

    Raises:
        ValueError: not one of :data:`CHANGES`, worded with them.
    """
    name, sep, value = text.strip().lower().partition("=")
    if name in ("checkpointing", "adafactor", "adamw8bit") and not sep:
        return name, None
    if name == "micro-batch" and value.isdigit() and int(value) >= 1:
        return name, int(value)
    raise ValueError(f"--what-if {text!r}: use one of {', '.join(CHANGES)} (N a positive integer)")


def checkpoint_blocks(model: Any) -> list[tuple[str, Any]]:
    """The modules to checkpoint: instances of the most repeated class among modules that have
    children and parameters (the outermost class on a tie); ``[]`` when nothing repeats."""
    candidates = [(n, m) for n, m in model.named_modules()
                  if n and any(True for _ in m.children()) and any(True for _ in m.parameters())]
    counts = Counter(type(m) for _, m in candidates)
    repeated = [cls for cls, c in counts.items() if c >= 2]
    if not repeated:
        return []
    depth = {cls: min(n.count(".") for n, m in candidates if type(m) is cls) for cls in repeated}
    best = max(repeated, key=lambda cls: (counts[cls], -depth[cls]))
    return [(n, m) for n, m in candidates if type(m) is best]


def checkpoint_saved(model: Any, blocks: list[tuple[str, Any]], make_batch, batch: int, device,
                     precision: str, loss_fn: Callable) -> CheckpointSaved:
    """One forward (and loss) at ``batch``: saved bytes split by block, and the blocks' inputs."""
    import torch

    from gpudoctor.memory.estimate import _autocast

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    stack: list[int] = []
    saved: dict[int, tuple[int, int | None]] = {}  # storage -> (bytes, block index or None)
    inputs: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in params and ptr not in saved:
            saved[ptr] = (storage.nbytes(), stack[-1] if stack else None)
        return t

    def pre(index: int):
        def hook(module, args):
            for a in args:
                if isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() not in params:
                    inputs.setdefault(a.untyped_storage().data_ptr(), a.untyped_storage().nbytes())
            stack.append(index)
        return hook

    def post(module, args, output):
        if stack:
            stack.pop()

    handles = []
    for i, (_, block) in enumerate(blocks):
        handles += [block.register_forward_pre_hook(pre(i)), block.register_forward_hook(post)]
    try:
        x, target = make_batch(batch, device)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), _autocast(device, precision):
            loss = loss_fn(model(x), target)
        del loss, x, target
    finally:
        for h in handles:
            h.remove()
    per_block: dict[int, int] = {}
    outside = 0
    for size, block in saved.values():
        if block is None:
            outside += size
        else:
            per_block[block] = per_block.get(block, 0) + size
    outside_ptrs = {ptr for ptr, (_, block) in saved.items() if block is None}
    return CheckpointSaved(
        batch_size=batch, total_bytes=sum(size for size, _ in saved.values()), outside_bytes=outside,
        block_input_bytes=sum(size for ptr, size in inputs.items() if ptr not in outside_ptrs),
        largest_block_bytes=max(per_block.values(), default=0),
    )


def what_if(est: MemoryEstimate, change: str, *, model_factory: Callable[[], Any], make_batch,
            config, loss_fn: Callable) -> WhatIf:
    """Answer one ``--what-if`` from the estimate ``est`` of the same model and config."""
    from gpudoctor.core.device import select_device

    name, value = parse_what_if(change)
    batch = est.batch_size
    activations = est.activation_bytes_per_sample * batch
    peak = est.peak_bytes
    if name in ("adafactor", "adamw8bit"):
        model = model_factory()
        trainable = [p for p in model.parameters() if p.requires_grad]
        after = (adafactor_state_bytes(p.shape for p in trainable) if name == "adafactor"
                 else adamw8bit_state_bytes(p.numel() for p in trainable))
        before = est.optimizer_state_bytes
        return WhatIf(change=name, part="optimizer state", before_bytes=before, after_bytes=after,
                      peak_before_bytes=peak, peak_after_bytes=peak - before + after,
                      how=OPTIMIZER_STATE[name],
                      notes=(f"now: {est.optimizer} ({human_bytes(before)})",))
    if name == "micro-batch":
        assert value is not None
        micro, steps = micro_batch_plan(batch, value)
        after = est.activation_bytes_per_sample * micro
        notes = [f"{steps} accumulation steps of {micro} give {micro * steps} samples per update "
                 "(divide the loss by the steps; under DDP, no_sync() on all but the last)"]
        model = model_factory()
        if any("BatchNorm" in type(m).__name__ for m in model.modules()):
            notes.append(f"BatchNorm then normalises over {micro} samples per GPU, not {batch}: "
                         "consider SyncBatchNorm (DDP) or GroupNorm when that is small")
        return WhatIf(change=f"micro-batch={value}", part="activations", before_bytes=activations,
                      after_bytes=after, peak_before_bytes=peak,
                      peak_after_bytes=memory_model.peak_at(est.fixed_bytes, est.activation_bytes_per_sample, micro),
                      how="activations per sample x micro-batch (the estimate's line)", notes=tuple(notes))
    device = select_device(config.device)
    model = model_factory().to(device)
    blocks = checkpoint_blocks(model)
    if not blocks:
        return WhatIf(change=name, part="activations", before_bytes=activations, after_bytes=activations,
                      peak_before_bytes=peak, peak_after_bytes=peak,
                      how="no repeated block found to checkpoint",
                      notes=("checkpoint the model's own stages by hand: "
                             "torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)",))
    points = [checkpoint_saved(model, blocks, make_batch, b, device, config.precision, loss_fn)
              for b in config.probes()]
    _, plain = memory_model.fit_affine([(p.batch_size, p.total_bytes) for p in points])
    _, ckpt = memory_model.fit_affine([(p.batch_size, p.checkpointed_bytes) for p in points])
    ratio = min(ckpt / plain, 1.0) if plain > 0 else 1.0
    after = int(round(activations * ratio))
    kind = type(blocks[0][1]).__name__
    return WhatIf(
        change=name, part="activations", before_bytes=activations, after_bytes=after,
        peak_before_bytes=peak, peak_after_bytes=peak - activations + after,
        how=(f"{len(blocks)} {kind} blocks checkpointed: saved tensors per sample "
             f"{human_bytes(plain)} -> {human_bytes(ckpt)} (blocks' inputs + the rest + one block "
             "recomputed in backward), applied to the estimate's activations"),
        notes=("for block in model.<blocks>: wrap its call as "
               "torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False); "
               "costs about one more forward of each block per step",),
    )
