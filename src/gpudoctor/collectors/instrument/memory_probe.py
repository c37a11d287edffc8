"""Memory mode of the probes (``gpudoctor memory run``): the allocator at each stage of a step.

For the first K optimizer steps, one :class:`StageMemory` line per stage goes to
``memory-rank{N}.jsonl``:

* ``model`` — once, what the script had allocated before any batch (weights, buffers, anything
  made at start-up): when the first batch leaves the DataLoader (before it is copied); a script
  without a DataLoader gets it from a reading taken just before its first host-to-device copy
  outside a start-up move (``Module.to``/``.cuda``, ``Optimizer.load_state_dict``), written at
  the next stage (if a DataLoader batch comes first, the reading is dropped and the loader's is
  used, as always). With neither a loader nor a copy (a batch made on the
  device) it is taken when the trained model's forward begins, and then holds step 0's batch;
* ``batch`` — after the DataLoader's ``__next__`` returned and the step's first host-to-device
  copy finished (the batch is on the device); the first micro-batch of a step only. When no
  loader armed it (no DataLoader, or a batch made on the device), at the start of the step's
  first forward of the trained model: the inputs made since the last stage. Not at step 0 when
  the ``model`` line already holds that batch (no copy was seen);
* ``forward`` — at the end of the trained model's forward (activations are alive): the
  outermost call of a module with trainable parameters under grad mode
  (:mod:`~gpudoctor.collectors.instrument.module_memory`); a script whose forward is not a
  module call gets it when ``backward()`` is first called in the step instead;
* ``loss`` — when ``backward()`` is first called in a step whose forward was seen: the loss and
  whatever the script made after the forward;
* ``backward`` — in the optimizer's step pre-hook (gradients exist, activations are freed);
* ``optimizer`` — in the step post-hook (the first step creates the optimizer state);
* ``zero_grad`` — after ``optimizer.zero_grad()``, with the bytes it freed (the previous step's
  gradients with ``set_to_none=True``), wherever the script calls it: the analysis needs it to
  separate activations from gradients that were still alive when the batch arrived.

Lines are written in the order the events happen, whatever the script's order: pytorch/examples'
imagenet script calls ``zero_grad()`` between the forward and ``backward()``, so its lines read
batch, forward, zero_grad, loss, backward, optimizer.

With ``--modules`` (``GPUDOCTOR_MEMORY_MODULES``) one probed step (the second, or the only one)
also gets a ``modules-rank{N}.jsonl`` line per module of the trained model: its forward's kept
bytes and peak. After the probed steps, :mod:`~gpudoctor.collectors.instrument.leak_probe`
compares live bytes per allocation site between steps (``leak-sites-rank{N}.json``).

The peak of each line is the allocator's peak since the previous stage: the peak counter is
reset at every stage (``torch.cuda.reset_peak_memory_stats``), which also resets the script's own
``max_memory_allocated``. The reads are the allocator's host-side counters, which are exact at
the moment of the call because the caching allocator accounts for a tensor when it is created on
the host, not when its kernel runs; no device synchronisation is added here. Memory mode also
records allocation stacks (``_record_memory_history``), which costs host time on every
allocation: it is a memory diagnosis, not a speed measurement. On an out-of-memory error the
snapshot and ``oom.json`` are written to the run directory
(:func:`gpudoctor.core.memory_history.attach_oom_dump`).

History and the OOM observer start at the first stage, not at ``import torch``: by then the
script has chosen its device (``torch.cuda.set_device(local_rank)``), so no rank opens a CUDA
context on GPU 0 by mistake. An OOM while the model itself is moved to the GPU is therefore not
captured with stacks.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from gpudoctor.collectors.instrument import ENV_MEMORY_MODULES, leak_probe, patches
from gpudoctor.collectors.instrument.copy_watch import CopyWatch
from gpudoctor.collectors.instrument.module_memory import ModuleHooks, ModulePeaks
from gpudoctor.collectors.instrument.state import S, is_owner
from gpudoctor.records.base import JsonlWriter
from gpudoctor.records.memory import StageMemory
from gpudoctor.records.rundir import KIND_MEMORY, KIND_MODULES, memory_file, modules_file


class _Memory:
    """Per-process state of memory mode."""

    def __init__(self) -> None:
        self.stages = 0  # probe the first ``stages`` optimizer steps; 0: off
        self.writer: JsonlWriter | None = None
        self.model_done = False
        self.history_started = False
        self.batch_armed = False
        self.forward_step = -1  # the step whose forward stage is recorded (first forward only)
        self.loss_step = -1  # the step whose first backward() was seen
        self.batch_step = -1  # the step whose batch stage is recorded (first micro-batch only)
        self.optimizer: Any = None
        self.forward_seen = -1  # the step in which the trained model's forward ended
        self.hooks: ModuleHooks | None = None
        self.peaks: ModulePeaks | None = None
        self.modules_step = -1  # the step whose modules are measured (--modules); -1: off
        self.modules_written = False
        self.loader_seen = False  # a DataLoader batch arrived: the model stage is the loader's
        self.pending_model: StageMemory | None = None  # read before the first copy (no loader)


M = _Memory()


def active() -> bool:
    return M.stages > 0 and is_owner() and not S.finished and S.step < M.stages


def _cuda_ready() -> Any:
    import torch

    return torch if torch.cuda.is_available() and torch.cuda.is_initialized() else None


def _start_history(torch: Any) -> None:
    """Allocation stacks and the OOM dump, once the script has put something on its GPU."""
    if M.history_started:
        return
    M.history_started = True
    from gpudoctor.core.dist import dist_env
    from gpudoctor.core.memory_history import attach_oom_dump, start_history

    try:
        start_history()
        assert S.run_dir is not None
        # under torchrun every rank writes its own files (oom-rank{N}.json), none overwrites another
        attach_oom_dump(S.run_dir, rank=S.rank if dist_env().is_distributed else None)
    except Exception as exc:  # noqa: BLE001 - a diagnosis aid must never stop training
        print(f"gpudoctor: allocation history not recorded ({type(exc).__name__}: {exc})", file=sys.stderr)


def _reading(torch: Any, stage: str, before_bytes: int | None = None) -> StageMemory:
    """The allocator's counters now, as one stage line (host-side reads, no sync)."""
    allocated = int(torch.cuda.memory_allocated())
    return StageMemory(
        stage=stage,
        step=S.step,
        allocated_bytes=allocated,
        reserved_bytes=int(torch.cuda.memory_reserved()),
        peak_allocated_bytes=max(int(torch.cuda.max_memory_allocated()),
                                 M.peaks.take_carry() if M.peaks is not None else 0),
        freed_bytes=max(before_bytes - allocated, 0) if before_bytes is not None else 0,
    )


def _write(line: StageMemory) -> None:
    if M.writer is None:
        assert S.run_dir is not None
        M.writer = JsonlWriter(S.run_dir / memory_file(S.rank), kind=KIND_MEMORY)
    M.writer.write(line)  # flushed per line: an OOM right after loses nothing


def record(stage: str, *, before_bytes: int | None = None) -> None:
    """Write one stage line and reset the peak counter (host-side reads, no sync).

    ``before_bytes``: allocated before the call that ends the stage (``zero_grad``), so the
    line can say what the call freed.
    """
    if not active():
        return
    torch = _cuda_ready()
    if torch is None:
        return  # on the CPU the allocator keeps no statistics: nothing to record
    _start_history(torch)
    was_quiet, S.quiet = S.quiet, True
    try:
        line = _reading(torch, stage, before_bytes)
        torch.cuda.reset_peak_memory_stats()
        _write(line)
    except Exception as exc:  # noqa: BLE001
        print(f"gpudoctor: memory stage {stage} not recorded ({type(exc).__name__}: {exc})", file=sys.stderr)
    finally:
        S.quiet = was_quiet


def _model_once() -> None:
    """The ``model`` line, once: the reading taken before the first copy when there is one."""
    if M.model_done or not active() or _cuda_ready() is None:
        return
    M.model_done = True
    pending, M.pending_model = M.pending_model, None
    if pending is None:
        record("model")
        return
    try:
        _write(pending)
    except Exception as exc:  # noqa: BLE001
        print(f"gpudoctor: memory stage model not recorded ({type(exc).__name__}: {exc})", file=sys.stderr)


def _wants_copy() -> bool:
    return not M.model_done and not M.loader_seen and M.pending_model is None


def _before_copy() -> None:
    """A host-to-device copy is about to allocate: without a DataLoader, the first one outside a
    model move is taken as the first batch's, so the counters are read now for the ``model``
    line. The peak counter is not reset: a DataLoader batch coming first drops the reading."""
    if not _wants_copy() or S.quiet or not active():
        return
    torch = _cuda_ready()
    if torch is None:
        return  # the script's first CUDA tensor: nothing allocated before it to read
    _start_history(torch)
    was_quiet, S.quiet = S.quiet, True
    try:
        M.pending_model = _reading(torch, "model")
    except Exception as exc:  # noqa: BLE001
        print(f"gpudoctor: memory stage model not recorded ({type(exc).__name__}: {exc})", file=sys.stderr)
    finally:
        S.quiet = was_quiet


def install(stages: int) -> None:
    """Wrap the loader, the copy probe and backward; register the optimizer step hooks.

    Called by :func:`gpudoctor.collectors.instrument.probes.install` after the patches and
    before the step-boundary hook, so ``optimizer`` is recorded before the boundary (which may
    end the process under ``--steps``).
    """
    if stages <= 0:
        return
    M.stages = stages
    import torch
    import torch.autograd as autograd
    import torch.optim.optimizer as optim_mod
    from torch.utils.data import dataloader as dl

    base = dl._BaseDataLoaderIter
    orig_next = base.__next__

    def __next__(self):
        out = orig_next(self)
        if active() and not S.quiet and M.batch_step != S.step:
            if not M.model_done:
                M.loader_seen, M.pending_model = True, None  # the loader's model line, as always
            _model_once()  # before the batch is copied: weights and start-up allocations only
            M.batch_armed = True
        return out

    base.__next__ = __next__

    orig_note = patches._note_h2d

    def note_h2d(src: Any, t0: float, non_blocking: bool) -> None:
        orig_note(src, t0, non_blocking)
        if M.batch_armed:
            M.batch_armed = False
            M.batch_step = S.step
            record("batch")

    patches._note_h2d = note_h2d  # the copy wrappers look the name up at call time

    orig_backward = autograd.backward

    def backward(tensors, *args, **kwargs):
        if active() and not S.quiet and M.loss_step != S.step and isinstance(
            tensors[0] if isinstance(tensors, (list, tuple)) and tensors else tensors, torch.Tensor
        ):
            M.batch_armed = False  # a batch made on the device: no copy to wait for
            M.loss_step = S.step
            _model_once()
            _write_modules()
            if M.hooks is not None:
                M.hooks.reset()
            if M.forward_step == S.step:  # the forward's end was recorded: this is the loss
                record("loss")
            else:
                record("forward")
            M.forward_step = S.step
        return orig_backward(tensors, *args, **kwargs)

    backward.__doc__ = orig_backward.__doc__
    backward.__wrapped__ = orig_backward
    autograd.backward = backward

    orig_zero_grad = torch.optim.Optimizer.zero_grad

    def zero_grad(self, *args, **kwargs):
        torch_cuda = _cuda_ready() if active() and (M.optimizer is None or self is M.optimizer) else None
        if torch_cuda is None:
            return orig_zero_grad(self, *args, **kwargs)
        _model_once()
        before = int(torch_cuda.cuda.memory_allocated())
        result = orig_zero_grad(self, *args, **kwargs)
        record("zero_grad", before_bytes=before)
        return result

    zero_grad.__doc__ = orig_zero_grad.__doc__
    zero_grad.__wrapped__ = orig_zero_grad
    torch.optim.Optimizer.zero_grad = zero_grad

    def pre_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
        if M.optimizer is None:
            M.optimizer = optimizer
        if optimizer is M.optimizer:
            _model_once()
            record("backward")
            if not active() and is_owner() and M.history_started and S.step >= M.stages:
                cuda = _cuda_ready()
                if cuda is not None:
                    leak_probe.on_step(cuda, M.stages)

    def post_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
        if optimizer is M.optimizer:
            record("optimizer")

    optim_mod.register_optimizer_step_pre_hook(pre_hook)
    optim_mod.register_optimizer_step_post_hook(post_hook)
    CopyWatch(wanted=_wants_copy, before_copy=_before_copy).install(torch)
    _install_module_hooks(torch, modules=os.environ.get(ENV_MEMORY_MODULES, "") not in ("", "0"))


def _forward_start() -> None:
    """The trained model's forward begins: the ``model`` line if none was written yet, and the
    ``batch`` stage when no loader recorded or armed one in this step (no DataLoader, or a batch
    made on the device): what the script made since the last stage are the forward's inputs."""
    if not active() or S.quiet or M.batch_armed or M.batch_step == S.step or _cuda_ready() is None:
        return
    in_model = not M.model_done and M.pending_model is None  # no copy seen: the batch is in it
    _model_once()
    M.batch_step = S.step
    if not in_model:
        record("batch")


def _forward_end() -> None:
    """The trained model's forward returned: the ``forward`` stage (first forward of the step)."""
    if not active() or S.quiet or M.forward_step == S.step or _cuda_ready() is None:
        return
    M.batch_armed = False
    M.forward_step = S.step
    _model_once()
    record("forward")
    _write_modules()


def _install_module_hooks(torch: Any, *, modules: bool) -> None:
    if modules:
        M.modules_step = min(1, M.stages - 1)  # step 1: cuDNN has chosen, the optimizer state exists
        cuda = torch.cuda
        M.peaks = ModulePeaks(allocated=lambda: int(cuda.memory_allocated()),
                              peak=lambda: int(cuda.max_memory_allocated()),
                              reset=cuda.reset_peak_memory_stats)
    M.hooks = ModuleHooks(on_forward_start=_forward_start, on_forward_end=_forward_end, active=active,
                          measure_now=lambda: M.modules_step == S.step and _cuda_ready() is not None,
                          peaks=M.peaks)
    M.hooks.install()


def _write_modules() -> None:
    """Write the measured step's module lines once its first forward ended."""
    if M.peaks is None or M.modules_written or not M.peaks.rows or S.step != M.modules_step:
        return
    M.modules_written = True
    try:
        assert S.run_dir is not None
        with JsonlWriter(S.run_dir / modules_file(S.rank), kind=KIND_MODULES) as writer:
            for line in M.peaks.records(S.step):
                writer.write(line)
    except Exception as exc:  # noqa: BLE001
        print(f"gpudoctor: module memory not recorded ({type(exc).__name__}: {exc})", file=sys.stderr)


def close() -> None:
    if M.writer is not None:
        M.writer.close()
        M.writer = None
