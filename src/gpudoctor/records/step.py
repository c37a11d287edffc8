"""Per-step records: what one optimizer step of one rank cost, measured without added syncs.

Both sides write these: the in-process probes of ``gpudoctor run`` (for an unmodified script) and
the engine's observer (``gpudoctor.train``). Analysis reads them from ``steps-rank{N}.jsonl``.
"""

from __future__ import annotations

from gpudoctor.records.base import record
from gpudoctor.records.memory import AllocatorStats

# The named host operations the probes time in every step (HostOp.op).
OP_SAVE = "torch.save"
OP_LOAD = "torch.load"
OP_GC = "gc"


@record
class HostOp:
    """Host time of one named operation in one step, measured around every call.

    Attributes:
        op: :data:`OP_SAVE`, :data:`OP_LOAD` (serialization) or :data:`OP_GC` (the garbage
            collector's pauses, from ``gc.callbacks``).
        ms: host wall time inside it, summed over the step's calls (a collection inside a
            ``torch.save`` counts in both).
        calls: calls (collections for ``gc``); ``bytes``: bytes written or read, when a path or
            a seekable file told (0 when unknown); ``gen2``: full collections (``gc`` only).
        site: the innermost frame of the script's own code in the longest call,
            ``function (file.py:88)``; empty for ``gc`` (it runs wherever an allocation hits).
    """

    op: str
    ms: float
    calls: int = 1
    bytes: int = 0
    gen2: int = 0
    site: str = ""


@record
class HostFrame:
    """The script's own code the stack sampler found the training thread in, in a step that had
    already run for several recent median steps.

    Attributes:
        function, file, line: the innermost frame of the script's own code (not the interpreter's
            library, installed packages or gpudoctor).
        samples: how many samples found it there; ``ms``: the time they stand for.
        op: the named operation running then (``HostOp.op``), or empty.
        lib: the innermost frame's module and function when it was outside the script
            (``torch.nn.modules.conv.forward``, ``PIL.Image.save``), or empty.
        callers: up to two outer frames of the script's own code, ``function (file.py:12)``.
    """

    function: str
    file: str
    line: int
    samples: int
    ms: float
    op: str = ""
    lib: str = ""
    callers: tuple[str, ...] = ()


@record
class StepRecord:
    """One optimizer step of one rank.

    Times are host wall-clock milliseconds unless named ``gpu_``. ``step_ms`` runs from the end
    of the previous optimizer step to the end of this one, so the parts below add up to at most it.

    Attributes:
        rank: global rank of the process.
        step: optimizer-step index, from 0.
        t_end_s: ``time.time()`` at the end of the step (to line up with GPU samples).
        step_ms: host wall time of the whole step.
        data_wait_ms: time blocked in ``DataLoader.__next__`` (waiting for the next batch).
        h2d_ms: host time spent issuing host-to-device copies; ``None`` when not measured.
        gpu_ms: GPU time between this step's boundaries, from CUDA events read lazily;
            ``None`` on CPU or when not yet read.
        h2d_bytes: bytes copied host-to-device in the step.
        h2d_pageable_bytes: of those, bytes whose source was not pinned.
        h2d_wide_float_bytes: of those, bytes of float32/float64 sources (what uint8 or bf16
            inputs would shrink); 0 in older records.
        h2d_copies: number of host-to-device copy calls.
        h2d_blocking_copies: copies issued without ``non_blocking=True``.
        host_syncs: counted synchronising calls (``.item()``, ``.cpu()``, ``.tolist()``,
            ``torch.cuda.synchronize()``, printing a CUDA tensor, ...).
        sync_ms: host time blocked in those calls (waiting for the GPU to finish queued work);
            ``None`` in records from before gpudoctor 0.2 and from the engine.
        samples: batch size (first dimension of the first batch tensor) or ``None``.
        tokens: tokens in the step for sequence models, or ``None``.
        loss: the loss value when it was read without a sync (lazily), else ``None``.
        loss_finite: whether the loss was finite, checked asynchronously; ``None`` if unknown.
        mem: allocator statistics at the end of the step (CUDA only).
        scaler_scale: GradScaler scale after ``update()``, or ``None`` without a scaler.
        scaler_skipped: whether the scaler skipped this optimizer step (inf/NaN gradients).
        micro_steps: forward/backward passes folded into this optimizer step (accumulation).
        empty_cache_calls: ``torch.cuda.empty_cache()`` calls in the step (added by
            ``gpudoctor run``; calling it every step slows training and fixes no leak).
        compiles: frames ``torch.compile`` compiled during the step (``None`` when TorchDynamo
            was not in use); after warm-up each one is a recompilation.
        compile_ms: host time TorchDynamo/Inductor spent compiling during the step, from
            torch's compile start/end callbacks (added by ``gpudoctor run``; ``None`` when
            TorchDynamo was not in use or this torch has no such callbacks).
        grad_norm: the global gradient norm the script's ``torch.nn.utils.clip_grad_norm_``
            returned in the step (its last call), read lazily like the loss (added by
            ``gpudoctor run``); ``None`` when the script does not clip.
        host_ops: the named host operations of the step with their time (serialization, garbage
            collection); empty when none ran or in older recordings.
        host_frames: where the stack sampler found the training thread in a step that ran
            long (``HostFrame``), most samples first; empty in normal steps.
    """

    rank: int
    step: int
    t_end_s: float
    step_ms: float
    data_wait_ms: float = 0.0
    h2d_ms: float | None = None
    gpu_ms: float | None = None
    h2d_bytes: int = 0
    h2d_pageable_bytes: int = 0
    h2d_wide_float_bytes: int = 0
    h2d_copies: int = 0
    h2d_blocking_copies: int = 0
    host_syncs: int = 0
    sync_ms: float | None = None
    samples: int | None = None
    tokens: int | None = None
    loss: float | None = None
    loss_finite: bool | None = None
    mem: AllocatorStats | None = None
    scaler_scale: float | None = None
    scaler_skipped: bool | None = None
    micro_steps: int = 1
    empty_cache_calls: int = 0
    compiles: int | None = None
    grad_norm: float | None = None
    host_ops: tuple[HostOp, ...] = ()
    host_frames: tuple[HostFrame, ...] = ()
    compile_ms: float | None = None
