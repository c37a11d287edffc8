"""The training loop: ``Trainer(model, optimizer, loss_fn, config=...).fit(loader, epochs=..., val_loader=...)``.

Read it from top to bottom. Every host-device sync point is marked ``# SYNC``; the steady-state step
has none unless asked for (``robust.nonfinite="skip"``, fp16's GradScaler, OOM recovery under
torchrun), so the host runs ahead of the GPU and the GPU never waits for Python.

Run it on one GPU with ``python train.py``; on one node with
``torchrun --standalone --nproc_per_node 8 train.py``; on several nodes with
``torchrun --nnodes 2 --nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint HOST:29500 train.py``.
Add ``--max-restarts 3`` and a ``checkpoint.dir``: a restarted worker resumes from the newest
checkpoint by itself.
"""

from __future__ import annotations

import itertools
import random
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from gpudoctor.core.device import select_device
from gpudoctor.core.dist import dist_env
from gpudoctor.records.step import StepRecord
from gpudoctor.train import checkpoint as ckpt
from gpudoctor.train.config import TrainConfig
from gpudoctor.train.data import ResumableSampler, batch_size_of, fast_loader, move_to_device, split_batch
from gpudoctor.train.events import Observer, StepTracker
from gpudoctor.train.metrics import FitResult, count_flops, format_summary, lr_scale_factor, mfu
from gpudoctor.train.oom import MicroBatchSplit, OomCapture, free_memory
from gpudoctor.train.parallel import Parallel, unwrap
from gpudoctor.train.perf import (apply_activation_checkpointing, configure_backends, maybe_compile,
                                  resolve_channels_last, to_channels_last)
from gpudoctor.train.precision import Precision, to_fp32
from gpudoctor.train.prefetch import CudaPrefetcher
from gpudoctor.train.progress import ProgressBar


FLOP_SAMPLES = 8  # samples the one-off FLOP count runs on


class NonFiniteLossError(FloatingPointError):
    """The loss became NaN or inf and ``robust.nonfinite`` says to stop."""


def default_unpack(batch: Any) -> tuple[Any, Any]:
    """``(inputs, target)`` from a ``(inputs, target)`` batch: ``model(inputs)``, ``loss_fn(out, target)``."""
    return batch[0], batch[1]


class Trainer:
    """Train ``model`` with ``optimizer`` on ``loss_fn(model(inputs), target)``.

    Args:
        model: a ``torch.nn.Module`` on any device (moved to this rank's device).
        optimizer: an optimizer over ``model``'s parameters, or a function ``params -> optimizer``
            (required for FSDP2, whose sharded parameters exist only after wrapping).
        loss_fn: ``loss_fn(outputs, target) -> scalar`` mean-reduced over the batch.
        config: the :class:`TrainConfig`.
        scheduler: an LR scheduler stepped once per optimizer step that really happened.
        observers: receive step events (``on_run_start``/``on_step_end``/``on_run_end``).
        unpack: splits a batch into ``(inputs, target)``.

    Example::

        trainer = Trainer(model, torch.optim.AdamW(model.parameters(), lr=1e-3), nn.CrossEntropyLoss(),
                          config=presets.single_gpu_bf16())
        result = trainer.fit(train_loader, epochs=10, val_loader=val_loader)

    Under torchrun the trainer joins the process group; ``with Trainer(...) as trainer:`` (or
    :meth:`close`) leaves it again at the end, as a distributed script should.
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | Callable, loss_fn: Callable, *,
                 config: TrainConfig | None = None, scheduler: Any = None, observers: Sequence[Observer] = (),
                 unpack: Callable[[Any], tuple[Any, Any]] = default_unpack) -> None:
        self.config = cfg = config or TrainConfig()
        self.env = dist_env()
        self.device = select_device(cfg.device, self.env)
        # set_device -> init_process_group(device_id, timeout) -> model.to -> wrap, in that order
        self.parallel = Parallel(cfg.parallel, self.env, self.device)
        self.sharded, self.is_main = self.parallel.strategy == "fsdp", self.env.rank == 0
        self.precision = Precision(cfg.precision, self.device)
        configure_backends(cfg.perf, self.device)
        apply_activation_checkpointing(model, cfg.perf.activation_checkpointing)
        self.channels_last = resolve_channels_last(cfg.perf.channels_last, model, self.device, sharded=self.sharded)
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        self.model = self.parallel.wrap(model)
        self.train_model = maybe_compile(self.model, cfg.perf)  # compile after wrapping (DDPOptimizer)
        self.optimizer = optimizer if isinstance(optimizer, torch.optim.Optimizer) else optimizer(
            self.model.parameters())  # params -> optimizer (FSDP2's sharded params exist only now)
        self.loss_fn, self.scheduler, self.unpack = loss_fn, scheduler, unpack
        self.observers = list(observers)

    def close(self) -> None:
        """Leave the process group this trainer joined: a barrier, ``destroy_process_group`` and,
        under gloo, a wait for its threads (a group the caller made is left alone; nothing to do
        for one process). Idempotent."""
        self.parallel.close()

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        # After an error the group is left as it is: tearing it down while other ranks wait in a
        # collective can hang (torchtitan #1342); torchrun stops them when this rank exits.
        if exc_type is None:
            self.close()

    # ----------------------------------------------------------------------------- the loop
    def fit(self, train_loader: Iterable | Dataset, *, epochs: int = 1, val_loader: Iterable | None = None) -> FitResult:
        """Train for ``epochs`` (or until ``config.max_steps``); return what happened, reduced over ranks."""
        capture = OomCapture.start_for(self.config, self.env.rank, self.device)  # robust.oom_snapshot
        try:
            return self._fit(train_loader, epochs, val_loader, capture)
        finally:
            capture.close()  # stop the history recording it started, even when training failed

    def _fit(self, train_loader: Iterable | Dataset, epochs: int, val_loader: Iterable | None,
             oom_capture: OomCapture) -> FitResult:
        cfg, rob = self.config, self.config.robust
        loader = self._prepare_loader(train_loader)
        per_device = getattr(loader, "batch_size", None) or cfg.batch_size
        world = self.parallel.world_size
        global_batch = (per_device or 0) * cfg.grad_accum_steps * world
        lr_scale = lr_scale_factor(cfg.lr_scaling, global_batch, cfg.base_batch_size)
        self._scale_lr(lr_scale)
        if cfg.seed is not None:  # one seed per rank: dropout masks differ across ranks, as they should
            torch.manual_seed(cfg.seed + self.env.rank)
            random.seed(cfg.seed + self.env.rank)

        # Resume (model, optimizer, scaler, scheduler, progress, RNG) if a checkpoint is there:
        # this is what makes `torchrun --max-restarts` continue where the failed attempt stopped.
        epoch, step, skip_batches, resumed_from, resume_rng = 0, 0, 0, None, None
        split = MicroBatchSplit(per_device, rob.min_micro_batch)
        epoch_rng = None
        state = self._load_latest()
        if state is not None:
            p = state["progress"]
            epoch, step, skip_batches, split.split = p["epoch"], p["step"], p["batch_in_epoch"], p["split"]
            resumed_from = step
            epoch_rng, resume_rng = state["epoch_rng"][self.env.rank], state["rng"][self.env.rank]
            del state

        oom_recover = rob.oom_recover if rob.oom_recover is not None else world == 1
        tracker = StepTracker(self.env.rank, self.device, self.observers)
        flops_per_sample = cfg.log.flops_per_sample
        flops_tried = False  # counted once; None after that means it could not be counted
        for obs in self.observers:
            obs.on_run_start({"rank": self.env.rank, "world_size": world, "device": str(self.device),
                              "global_batch": global_batch, "config": cfg.to_dict()})
        bar = ProgressBar(self.is_main and cfg.log.progress_bar, cfg.max_steps or epochs * _len(loader))
        self.train_model.train()
        skipped, consecutive_skips, samples, stopped, val_loss = 0, 0, 0, None, None
        t_start = t_last = time.perf_counter()

        while epoch < epochs and stopped is None:
            # The epoch's data order: set_epoch reshuffles; on resume, replay the epoch-start RNG so the
            # loader draws the same order, fast-forward past the batches already trained on, then put
            # the RNG back where the checkpoint left it.
            if hasattr(loader, "set_epoch"):
                loader.set_epoch(epoch)
            elif hasattr(getattr(loader, "sampler", None), "set_epoch"):  # DistributedSampler & co.
                loader.sampler.set_epoch(epoch)
            if epoch_rng is not None:  # resuming mid-epoch
                ckpt.set_rng_state(epoch_rng)
            elif resume_rng is not None:  # resuming at an epoch boundary
                ckpt.set_rng_state(resume_rng)
                resume_rng = None
            epoch_rng = ckpt.rng_state()
            batches = self._iter_from(loader, skip_batches)
            if resume_rng is not None:
                ckpt.set_rng_state(resume_rng)
                resume_rng = None
            batch_in_epoch, skip_batches = skip_batches, 0

            while stopped is None:
                # -- 1. data: take grad_accum_steps loader batches (time blocked here = data wait)
                t0 = time.perf_counter()
                group = [move_to_device(b, self.device) for b in itertools.islice(batches, cfg.grad_accum_steps)]
                data_wait_ms = (time.perf_counter() - t0) * 1e3
                if len(group) < cfg.grad_accum_steps:
                    break  # end of epoch (a short tail group is dropped: it would change the batch size)
                if flops_per_sample is None and self.device.type == "cuda" and not flops_tried:
                    flops_tried = True
                    flops_per_sample = self._count_flops(group[0])
                tracker.step_start()
                oom_capture.step_started(step)

                # -- 2. forward + backward over the micro-batches, halving them on OOM
                while True:
                    note = ""
                    try:
                        loss, micro_steps = self._forward_backward(group, split.split)
                        oom = 0
                    except torch.OutOfMemoryError as exc:
                        # the evidence (files; history for a repeat OOM) before memory is freed
                        retry = oom_recover and split.can_halve(batch_size_of(group[0]))
                        note = oom_capture.on_oom(exc, step, recovering=retry)
                        if not oom_recover:
                            raise
                        loss, oom = None, 1
                    if oom_recover and world > 1:
                        oom = self.parallel.all_reduce_max(oom)  # SYNC + collective: all ranks agree
                    if not oom:
                        break
                    free_memory(self.optimizer)
                    split.halve(batch_size_of(group[0]), note=note)

                # -- 3. optimizer step (unscale -> clip -> step -> update), guarded against NaN/inf
                do_step = True
                if rob.nonfinite == "skip":
                    bad = int(not bool(torch.isfinite(loss)))  # SYNC: reads the loss on the host
                    do_step = not self.parallel.all_reduce_max(bad)
                stepped = self.precision.step(self.optimizer, self.model.parameters()) if do_step else False
                if stepped and self.scheduler is not None:
                    self.scheduler.step()  # not on a step the GradScaler skipped (Lightning #5558)
                self.optimizer.zero_grad(set_to_none=True)
                skipped += not stepped
                consecutive_skips = 0 if stepped else consecutive_skips + 1
                if rob.nonfinite == "skip" and consecutive_skips >= rob.max_skips:
                    stopped = f"{consecutive_skips} consecutive steps skipped for a non-finite loss/gradients"

                # -- 4. bookkeeping: the record is completed lazily, when the GPU gets there (no sync)
                t_now, wall = time.perf_counter(), time.time()
                n = (batch_size_of(group[0]) or 0) * len(group)
                samples += n
                tracker.step_end(StepRecord(
                    rank=self.env.rank, step=step, t_end_s=wall, step_ms=(t_now - t_last) * 1e3,
                    data_wait_ms=data_wait_ms, samples=n, micro_steps=micro_steps,
                    scaler_scale=self.precision.scale_value() if self.precision.scaler.is_enabled() else None,
                    scaler_skipped=(not stepped) if self.precision.scaler.is_enabled() else None,
                ), loss)
                t_last = t_now
                step += 1
                batch_in_epoch += len(group)
                if rob.nonfinite == "stop" and tracker.nonfinite_steps:
                    self._stop_nonfinite(tracker)
                if step % cfg.log.every_steps == 0:
                    bar.update(step, tracker.last_loss, samples * world / (t_now - t_start))
                if cfg.max_steps is not None and step >= cfg.max_steps:
                    stopped = f"max_steps={cfg.max_steps} reached"
                if cfg.checkpoint.every_steps and step % cfg.checkpoint.every_steps == 0:
                    self._save(tracker, epoch, step, batch_in_epoch, split.split, epoch_rng)

            if batch_in_epoch >= _len(loader) or stopped is None:
                epoch += 1  # the epoch ran to its end
                if val_loader is not None:
                    val_loss = self.evaluate(val_loader)
                batch_in_epoch = 0
                epoch_rng = None

        tracker.flush()  # SYNC: wait for the GPU, emit the last records
        if rob.nonfinite == "stop" and tracker.nonfinite_steps:
            self._stop_nonfinite(tracker)
        elapsed = time.perf_counter() - t_start
        if cfg.checkpoint.dir is not None:
            self._save(tracker, epoch, step, batch_in_epoch, split.split, epoch_rng)
        bar.close()
        for obs in self.observers:
            obs.on_run_end(tracker.emitted)

        # Metrics reduced over ranks (one collective + SYNC at the end of the run)
        train_loss = tracker.last_loss
        if world > 1 and train_loss is not None:
            train_loss = float(self.parallel.mean(torch.tensor(train_loss, device=self.device)))
        per_device_rate = samples / elapsed if elapsed > 0 else 0.0
        util, why = mfu(flops_per_sample, per_device_rate, self.device, self.precision.peak_dtype)
        result = FitResult(
            steps=step, epochs_completed=epoch, samples=samples * world, elapsed_s=elapsed,
            samples_per_s=per_device_rate * world, global_batch=global_batch, per_device_batch=per_device,
            grad_accum_steps=cfg.grad_accum_steps, world_size=world, precision=self.precision.dtype_name,
            strategy=self.parallel.strategy, micro_batch_split=split.split, skipped_steps=skipped,
            resumed_from_step=resumed_from, train_loss=train_loss, val_loss=val_loss,
            flops_per_sample=flops_per_sample, mfu=util, mfu_reason=why, lr_scale=lr_scale, stopped_reason=stopped)
        if self.is_main and cfg.log.progress_bar:
            sys.stderr.write(format_summary(result))
        return result

    # ----------------------------------------------------------------------------- one step
    def _forward_backward(self, group: list[Any], split: int) -> tuple[torch.Tensor, int]:
        """Forward and backward every micro-batch; return the step's mean loss (a device tensor)."""
        micro = [m for b in group for m in split_batch(b, split)]
        total = sum(batch_size_of(m) or 1 for m in micro)
        loss_sum = torch.zeros((), device=self.device)
        for i, mb in enumerate(micro):
            inputs, target = self.unpack(mb)
            if self.channels_last:
                inputs = to_channels_last(inputs)
            weight = (batch_size_of(mb) or 1) / total  # micro-batch means -> the whole step's mean
            # gradients are all-reduced only on the last micro-step (no_sync before it)
            with self.parallel.no_sync(self.train_model, last_micro_step=i == len(micro) - 1):
                with self.precision.autocast():
                    outputs = self.train_model(inputs)
                loss = self.loss_fn(to_fp32(outputs), target)  # the loss is reduced in fp32
                self.precision.backward(loss * weight if weight != 1.0 else loss)
            loss_sum += loss.detach() * weight
        return loss_sum, len(micro)

    def evaluate(self, loader: Iterable) -> float:
        """Mean loss over ``loader`` (averaged over ranks; one SYNC at the end)."""
        self.train_model.eval()
        total = torch.zeros((), device=self.device)
        count = torch.zeros((), device=self.device)
        with torch.no_grad():
            for batch in loader:
                inputs, target = self.unpack(move_to_device(batch, self.device))
                if self.channels_last:
                    inputs = to_channels_last(inputs)
                with self.precision.autocast():
                    outputs = self.train_model(inputs)
                n = batch_size_of(target) or 1
                total += self.loss_fn(to_fp32(outputs), target).detach() * n
                count += n
        self.train_model.train()
        both = self.parallel.mean(torch.stack([total, count]))
        return float(both[0] / both[1])  # SYNC

    # ----------------------------------------------------------------------------- helpers
    def _prepare_loader(self, data: Iterable | Dataset) -> Iterable:
        """A Dataset becomes a ``fast_loader``; a CUDA DataLoader gets the stream prefetcher."""
        if isinstance(data, Dataset) and not isinstance(data, (DataLoader, IterableDataset)) \
                and not hasattr(data, "__iter__"):
            if self.config.batch_size is None:
                raise ValueError("fit() was given a Dataset: set TrainConfig.batch_size (per device)")
            data = fast_loader(data, self.config.batch_size, seed=self.config.seed or 0, env=self.env)
        if self.env.world_size > 1 and isinstance(data, DataLoader) and not hasattr(data.sampler, "set_epoch"):
            warnings.warn("under torchrun this DataLoader gives every rank the same batches; use fast_loader "
                          "or a DistributedSampler", RuntimeWarning, stacklevel=3)
        if self.device.type == "cuda" and isinstance(data, DataLoader):
            return CudaPrefetcher(data, self.device)
        return data

    @staticmethod
    def _iter_from(loader: Iterable, skip: int):
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

    def _count_flops(self, batch: Any) -> float | None:
        """FLOPs of one sample's forward+backward, counted once on the uncompiled module.

        Counted on a slice of at most :data:`FLOP_SAMPLES` samples (FLOPs grow linearly with the
        batch), so the count never needs more memory than training: a batch near the memory
        limit, which the OOM recovery would split, must not fail here first. ``None`` (MFU
        unknown) when even that slice does not fit.
        """
        raw = unwrap(self.model)
        size = batch_size_of(batch) or 1
        piece = split_batch(batch, -(-size // FLOP_SAMPLES))[0]  # ceil: chunks of at most FLOP_SAMPLES
        inputs, target = self.unpack(piece)
        if self.channels_last:
            inputs = to_channels_last(inputs)
        rng = ckpt.rng_state()
        buffers = {k: v.clone() for k, v in raw.named_buffers()}  # e.g. BatchNorm running stats

        def run() -> None:
            with self.precision.autocast():
                out = raw(inputs)
            self.loss_fn(to_fp32(out), target).backward()

        try:
            flops: float | None = count_flops(run) / max(batch_size_of(piece) or 1, 1)
        except torch.OutOfMemoryError:
            flops = None
        self.optimizer.zero_grad(set_to_none=True)
        ckpt.set_rng_state(rng)  # the counting pass must not change what training draws or tracks
        with torch.no_grad():
            for k, v in raw.named_buffers():
                v.copy_(buffers[k])
        return flops

    def _scale_lr(self, factor: float) -> None:
        if factor == 1.0:
            return
        for group in self.optimizer.param_groups:
            group["lr"] *= factor
            if "initial_lr" in group:
                group["initial_lr"] *= factor
        if self.scheduler is not None and hasattr(self.scheduler, "base_lrs"):
            self.scheduler.base_lrs = [lr * factor for lr in self.scheduler.base_lrs]

    def _stop_nonfinite(self, tracker: StepTracker) -> None:
        first = tracker.nonfinite_steps[0]
        raise NonFiniteLossError(
            f"the loss was NaN/inf at step {first} (rank {self.env.rank}); training stopped before "
            "saving a checkpoint. Lower the learning rate, add precision.grad_clip_norm, use bf16 "
            "instead of fp16, or set robust.nonfinite='skip' to skip such steps"
        )

    def _load_latest(self) -> dict[str, Any] | None:
        c = self.config.checkpoint
        path = ckpt.latest_checkpoint(c.dir) if c.dir and c.resume == "auto" else None
        if path is None:
            return None
        state = ckpt.load(path)
        ckpt.restore_model_and_optimizer(self.model, self.optimizer, state, self.sharded)
        self.precision.load_state_dict(state["scaler"])
        if self.scheduler is not None and state.get("scheduler") is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        if len(state["rng"]) != self.env.world_size:  # another world size: RNG streams cannot match
            state["rng"] = state["epoch_rng"] = [None] * self.env.world_size
        return state

    def _save(self, tracker: StepTracker, epoch: int, step: int, batch_in_epoch: int, split: int,
              epoch_rng: dict | None) -> None:
        """Write a checkpoint (rank 0; every rank contributes its RNG state). One SYNC: the pending
        step records are flushed first so a NaN loss is caught before it is saved."""
        tracker.flush()
        if self.config.robust.nonfinite == "stop" and tracker.nonfinite_steps:
            self._stop_nonfinite(tracker)
        state = {
            "model": ckpt.model_state(self.model, self.sharded),
            "optimizer": ckpt.optimizer_state(self.model, self.optimizer, self.sharded),
            "scaler": self.precision.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "progress": {"epoch": epoch, "step": step, "batch_in_epoch": batch_in_epoch, "split": split},
            "rng": self.parallel.gather_objects(ckpt.rng_state()),
            "epoch_rng": self.parallel.gather_objects(epoch_rng),
        }
        folder = self.config.checkpoint.dir
        if self.is_main:
            ckpt.checkpoint_path(folder, step).parent.mkdir(parents=True, exist_ok=True)
            ckpt.atomic_save(state, ckpt.checkpoint_path(folder, step))
            ckpt.prune(folder, self.config.checkpoint.keep_last)
        self.parallel.barrier()


def _len(loader: Iterable) -> int:
    try:
        return len(loader)  # type: ignore[arg-type]
    except TypeError:
        return 0
