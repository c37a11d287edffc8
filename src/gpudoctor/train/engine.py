"""Keep your own loop: the engine's pieces, in Fabric's style. ``Trainer`` is built on them.

    engine = Engine(presets.transformer_bf16())
    model, optimizer = engine.setup(model, optimizer)       # device, DDP/FSDP2, channels-last, compile
    for inputs, target in loader:
        inputs, target = engine.to_device((inputs, target))
        loss = engine.forward_loss(loss_fn, inputs, target)  # forward + loss, compiled together
        engine.backward(loss)                                # scaled under fp16
        engine.clip_and_step()                               # unscale -> clip -> step -> update -> zero_grad
    engine.save("ckpt/step-00000100.pt", step=100)
    engine.close()

``forward_loss`` is the piece that matters for speed. It runs ``loss_fn(model(inputs), target)``
under autocast as one function and, with ``perf.compile``, compiles that function whole: the loss
is traced into the model's graph, so inductor fuses the fp32 up-cast of the outputs into the loss
kernel instead of materialising an fp32 copy of them (16 x 1024 x 50,304 logits are 3.3 GB in
fp32). Losses run under autocast, whose policy computes the numerically sensitive ones
(``cross_entropy``, ``nll_loss``, ``mse_loss``, ``log_softmax``...) in fp32; the returned loss is
always fp32.

Gradient accumulation: wrap each micro-step's ``forward_loss`` and ``backward`` in
``engine.no_sync(last_micro_step=...)`` (DDP decides in the forward whether the backward
all-reduces, so the forward must be inside it too).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from gpudoctor.core.device import select_device
from gpudoctor.core.dist import dist_env
from gpudoctor.train import checkpoint as ckpt
from gpudoctor.train.config import TrainConfig
from gpudoctor.train.data import batch_size_of, move_to_device, split_batch
from gpudoctor.train.metrics import count_flops
from gpudoctor.train.parallel import Parallel, unwrap
from gpudoctor.train.perf import (apply_activation_checkpointing, configure_backends, maybe_compile,
                                  prepare_deterministic, resolve_channels_last, to_channels_last)
from gpudoctor.train.precision import Precision

FLOP_SAMPLES = 8  # samples the one-off FLOP count runs on


class Engine:
    """Device, process group, precision and checkpoint I/O for one run, per ``config``.

    Args:
        config: the :class:`TrainConfig` (its ``device``, ``precision``, ``parallel``, ``perf``
            and ``checkpoint`` sections are used here).

    Under torchrun the engine joins the process group (``set_device`` first, then
    ``init_process_group``); :meth:`close` leaves a group it joined.
    """

    def __init__(self, config: TrainConfig | None = None) -> None:
        self.config = cfg = config or TrainConfig()
        late = prepare_deterministic(cfg.perf)  # before select_device may start CUDA
        if late:
            warnings.warn(late, stacklevel=2)
        self.env = dist_env()
        self.device = select_device(cfg.device, self.env)
        # set_device -> init_process_group(device_id, timeout) -> model.to -> wrap, in that order
        self.parallel = Parallel(cfg.parallel, self.env, self.device)
        self.sharded, self.is_main = self.parallel.strategy == "fsdp", self.env.rank == 0
        self.precision = Precision(cfg.precision, self.device)
        configure_backends(cfg.perf, self.device)
        self.channels_last = False
        self.module: torch.nn.Module | None = None  # the wrapped (DDP/FSDP2), uncompiled model
        self.optimizer: torch.optim.Optimizer | None = None
        self._compiled: dict[int, tuple[Callable, Callable]] = {}

    # ----------------------------------------------------------------------------- setup
    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | Callable | None = None
              ) -> tuple[torch.nn.Module, torch.optim.Optimizer | None]:
        """Prepare ``model`` and ``optimizer`` for this run; return ``(model, optimizer)``.

        Activation checkpointing, channels-last, ``to(device)``, DDP or FSDP2, in that order.
        ``optimizer`` may be a function ``params -> optimizer`` (needed under FSDP2, whose
        sharded parameters exist only after wrapping). The returned model is the wrapped one,
        compiled with ``torch.compile`` when ``perf.compile`` is set (compilation is lazy: it
        costs nothing if you only call :meth:`forward_loss`, which compiles model and loss
        together).
        """
        perf = self.config.perf
        apply_activation_checkpointing(model, perf.activation_checkpointing)
        self.channels_last = resolve_channels_last(perf.channels_last, model, self.device, sharded=self.sharded)
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        self.module = self.parallel.wrap(model)
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            optimizer = optimizer(self.module.parameters())  # params -> optimizer
        self.optimizer = optimizer
        returned = torch.compile(self.module, mode=perf.compile_mode) if perf.compile else self.module
        return returned, optimizer

    def to_device(self, batch: Any) -> Any:
        """Move a (nested) batch to this rank's device without blocking (pinned sources overlap)."""
        return move_to_device(batch, self.device)

    def prepare_inputs(self, inputs: Any) -> Any:
        """Inputs in the model's memory format (4-D float tensors to channels-last when it is on)."""
        return to_channels_last(inputs) if self.channels_last else inputs

    def autocast(self) -> contextlib.AbstractContextManager:
        """The precision's forward context (autocast for bf16/fp16, nothing for fp32/tf32)."""
        return self.precision.autocast()

    # ----------------------------------------------------------------------------- one step
    def forward_loss(self, loss_fn: Callable, inputs: Any, target: Any) -> torch.Tensor:
        """``loss_fn(model(inputs), target)`` as one (compiled, with ``perf.compile``) function;
        the returned loss is an fp32 scalar on the device."""
        key = id(loss_fn)
        if key not in self._compiled:
            self._compiled[key] = (loss_fn, self._make_forward_loss(loss_fn))  # keeps loss_fn alive
        return self._compiled[key][1](self.prepare_inputs(inputs), target)

    def _make_forward_loss(self, loss_fn: Callable) -> Callable:
        module, precision = self._require_module(), self.precision

        def forward_loss(inputs: Any, target: Any) -> torch.Tensor:
            with precision.autocast():
                loss = loss_fn(module(inputs), target)
            return loss.float()  # a scalar: the cast costs nothing

        return maybe_compile(forward_loss, self.config.perf)

    def no_sync(self, *, last_micro_step: bool) -> contextlib.AbstractContextManager:
        """Around one micro-step's forward *and* backward: gradients are reduced across ranks only
        on the last micro-step of an accumulated step (DDP ``no_sync``, FSDP2
        ``set_requires_gradient_sync``); a no-op for one process."""
        return self.parallel.no_sync(self._require_module(), last_micro_step=last_micro_step)

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``, through the GradScaler under fp16."""
        self.precision.backward(loss)

    def clip_and_step(self, scheduler: Any = None) -> bool:
        """Unscale (fp16) -> clip to ``precision.grad_clip_norm`` -> ``optimizer.step`` -> scaler
        update -> ``scheduler.step`` (only when the optimizer really stepped) -> ``zero_grad``.
        Returns whether the optimizer stepped (False: fp16 found inf/NaN gradients)."""
        if self.optimizer is None:
            raise ValueError("clip_and_step() needs an optimizer: pass it to engine.setup(model, optimizer)")
        stepped = self.precision.step(self.optimizer, self._require_module().parameters())
        if stepped and scheduler is not None:
            scheduler.step()  # not on a step the GradScaler skipped (Lightning #5558)
        self.optimizer.zero_grad(set_to_none=True)
        return stepped

    def skip_step(self) -> bool:
        """Drop this step's gradients without stepping (a non-finite loss under ``nonfinite='skip'``);
        returns False (no step), like :meth:`clip_and_step` for a skipped step."""
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
        return False

    def count_flops(self, loss_fn: Callable, unpack: Callable, batch: Any) -> float | None:
        """FLOPs of one sample's forward+backward, counted once on the uncompiled module.

        Counted on a slice of at most :data:`FLOP_SAMPLES` samples (FLOPs grow linearly with the
        batch), so the count never needs more memory than training: a batch near the memory
        limit, which the OOM recovery would split, must not fail here first. ``None`` (MFU
        unknown) when even that slice does not fit. RNG, gradients and buffers are put back.
        """
        raw = self.raw_model
        size = batch_size_of(batch) or 1
        piece = split_batch(batch, -(-size // FLOP_SAMPLES))[0]  # ceil: chunks of at most FLOP_SAMPLES
        inputs, target = unpack(piece)
        inputs = self.prepare_inputs(inputs)
        rng = ckpt.rng_state()
        buffers = {k: v.clone() for k, v in raw.named_buffers()}  # e.g. BatchNorm running stats

        def run() -> None:
            with self.precision.autocast():
                loss = loss_fn(raw(inputs), target)
            loss.float().backward()

        try:
            flops: float | None = count_flops(run) / max(batch_size_of(piece) or 1, 1)
        except torch.OutOfMemoryError:
            flops = None
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
        else:
            raw.zero_grad(set_to_none=True)
        ckpt.set_rng_state(rng)  # the counting pass must not change what training draws or tracks
        with torch.no_grad():
            for k, v in raw.named_buffers():
                v.copy_(buffers[k])
        return flops

    # ----------------------------------------------------------------------------- checkpoints
    def state(self, **extra: Any) -> dict[str, Any]:
        """Model (prefix-free; full under FSDP2), optimizer and GradScaler states plus ``extra``.
        A collective under FSDP2: every rank must call it."""
        module = self._require_module()
        state = {"model": ckpt.model_state(module, self.sharded), "scaler": self.precision.state_dict()}
        if self.optimizer is not None:
            state["optimizer"] = ckpt.optimizer_state(module, self.optimizer, self.sharded)
        return {**state, **extra}

    def save(self, path: str | Path, **extra: Any) -> None:
        """Write :meth:`state` to ``path`` atomically (rank 0 writes; every rank must call it).

        ``extra`` must be data ``torch.load(weights_only=True)`` reads back (NumPy scalars are
        turned into Python numbers; a ``Path`` or an object raises ``TypeError`` saying what to pass)."""
        state = self.state(**ckpt.plain_extras(extra))
        if self.is_main:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            ckpt.atomic_save(state, Path(path))
        self.parallel.barrier()

    def restore(self, state: dict[str, Any]) -> dict[str, Any]:
        """Put a loaded state back into the model, optimizer and GradScaler; return the rest."""
        module = self._require_module()
        if self.optimizer is not None and "optimizer" in state:
            ckpt.restore_model_and_optimizer(module, self.optimizer, state, self.sharded)
        else:
            ckpt.load_model_state(module, state["model"])
        self.precision.load_state_dict(state.get("scaler", {}))
        return {k: v for k, v in state.items() if k not in ("model", "optimizer", "scaler")}

    def load(self, path: str | Path) -> dict[str, Any]:
        """Read ``path`` (``weights_only``), restore it, return the extra entries saved with it."""
        return self.restore(ckpt.load(path))

    def load_newest(self, folder: str | Path) -> tuple[Path, dict[str, Any]] | None:
        """Restore the newest checkpoint in ``folder`` that reads; one that does not (truncated,
        corrupt) is named in a warning and moved aside to ``*.corrupt``. ``None``: nothing to load.
        Raises :class:`~gpudoctor.train.checkpoint.CheckpointLoadError` when checkpoints exist but
        none loads (never a silent start from step 0)."""
        found = ckpt.load_newest(folder)
        if found is None:
            return None
        path, state = found
        return path, self.restore(state)

    def close(self) -> None:
        """Leave the process group this engine joined (a group the caller made is left alone)."""
        self.parallel.close()

    def _require_module(self) -> torch.nn.Module:
        if self.module is None:
            raise ValueError("call engine.setup(model, optimizer) first")
        return self.module

    @property
    def raw_model(self) -> torch.nn.Module:
        """The user's module, without DDP/compile wrappers."""
        return unwrap(self._require_module())
