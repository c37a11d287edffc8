"""The training loop: ``Trainer(model, optimizer, loss_fn, config=...).fit(loader, epochs=..., val_loader=...)``.

Read it from top to bottom: ``fit`` resumes (``_resume``), then for every epoch takes batches
until the loader's iterator is exhausted, running ``_step`` on each group of ``grad_accum_steps``
batches, and closes the epoch (``_end_epoch``). The pieces a step uses (forward and loss compiled
together, backward, clip and step, checkpoint I/O) are ``Engine``'s, for loops of your own.

Every host-device sync point is marked ``# SYNC``; the steady-state step has none unless asked
for (``robust.nonfinite="skip"``, fp16's GradScaler, OOM recovery under torchrun), so the host
runs ahead of the GPU and the GPU never waits for Python.

Run it on one GPU with ``python train.py``; on one node with
``torchrun --standalone --nproc_per_node 8 train.py``; on several nodes with
``torchrun --nnodes 2 --nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint HOST:29500 train.py``.
Add ``--max-restarts 3`` and a ``checkpoint.dir``: a restarted worker resumes from the newest
checkpoint by itself.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from gpudoctor.records.step import StepRecord
from gpudoctor.train import checkpoint as ckpt
from gpudoctor.train.config import TrainConfig
from gpudoctor.train.data import batch_size_of, split_batch
from gpudoctor.train.engine import Engine
from gpudoctor.train.epochs import iter_from, loader_len, prepare_loader, set_epoch
from gpudoctor.train.events import Observer, StepTracker
from gpudoctor.train.metrics import FitResult, RunClock, format_summary, lr_scale_factor, mfu, scale_lr
from gpudoctor.train.oom import MicroBatchSplit, OomCapture, free_memory
from gpudoctor.train.progress import ProgressBar
from gpudoctor.train.stops import (TERM_REASON, NonFiniteLossError as NonFiniteLossError, TermSignal,  # re-export
                                   nonfinite_error, skip_streak_error, write_term_message)


def default_unpack(batch: Any) -> tuple[Any, Any]:
    """``(inputs, target)`` from a ``(inputs, target)`` batch: ``model(inputs)``, ``loss_fn(out, target)``."""
    return batch[0], batch[1]


@dataclasses.dataclass
class _Run:
    """The state of one ``fit`` call (what a checkpoint's ``progress`` records, and counters)."""
    loader: Iterable
    per_device: int | None
    global_batch: int
    lr_scale: float
    split: MicroBatchSplit
    tracker: StepTracker
    clock: RunClock
    oom_capture: OomCapture
    oom_recover: bool
    flops_per_sample: float | None
    bar: ProgressBar = dataclasses.field(default_factory=lambda: ProgressBar(False, 0))
    term: TermSignal = dataclasses.field(default_factory=TermSignal)  # SIGTERM: save and stop
    flops_tried: bool = False  # counted once; None after that means it could not be counted
    epoch: int = 0
    step: int = 0
    steps_run: int = 0  # optimizer steps this fit() ran (the warm-up counts these)
    batch_in_epoch: int = 0
    skip_batches: int = 0
    epoch_rng: dict | None = None
    resume_rng: dict | None = None
    resumed_from: int | None = None
    skipped: int = 0
    consecutive_skips: int = 0
    samples: int = 0
    stopped: str | None = None
    val_loss: float | None = None
    t_last: float = dataclasses.field(default_factory=time.perf_counter)


class Trainer:
    """Train ``model`` with ``optimizer`` on ``loss_fn(model(inputs), target)``.

    Args:
        model: a ``torch.nn.Module`` on any device (moved to this rank's device).
        optimizer: an optimizer over ``model``'s parameters, or a function ``params -> optimizer``
            (required for FSDP2, whose sharded parameters exist only after wrapping).
        loss_fn: ``loss_fn(outputs, target) -> scalar`` mean-reduced over the batch. It runs under
            autocast, in the same compiled function as the model when ``perf.compile`` is set.
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
        self.config = config or TrainConfig()
        self.engine = engine = Engine(self.config)  # device, process group, precision, backends
        self.env, self.device, self.parallel, self.precision, self.sharded, self.is_main = (
            engine.env, engine.device, engine.parallel, engine.precision, engine.sharded, engine.is_main)
        _, self.optimizer = engine.setup(model, optimizer)  # channels-last, to(device), DDP/FSDP2
        self.model = engine.module  # wrapped, uncompiled: forward_loss compiles it with the loss
        self.loss_fn, self.scheduler, self.unpack = loss_fn, scheduler, unpack
        self.observers = list(observers)

    def close(self) -> None:
        """Leave the process group this trainer joined: a barrier, ``destroy_process_group`` and,
        under gloo, a wait for its threads (a group the caller made is left alone; nothing to do
        for one process). Idempotent."""
        self.engine.close()

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
            with TermSignal() as term:  # SIGTERM saves at the next step boundary and returns
                return self._fit(train_loader, epochs, val_loader, capture, term)
        finally:
            capture.close()  # stop the history recording it started, even when training failed

    def _fit(self, train_loader: Iterable | Dataset, epochs: int, val_loader: Iterable | None,
             capture: OomCapture, term: TermSignal) -> FitResult:
        run = dataclasses.replace(self._start(train_loader, capture), term=term)
        self._resume(run)
        for obs in self.observers:
            obs.on_run_start({"rank": self.env.rank, "world_size": self.parallel.world_size,
                              "device": str(self.device), "global_batch": run.global_batch,
                              "config": self.config.to_dict()})
        run.bar = ProgressBar(self.is_main and self.config.log.progress_bar,
                              self.config.max_steps or epochs * loader_len(run.loader))
        self.model.train()
        while run.epoch < epochs and run.stopped is None:
            batches = self._begin_epoch(run)
            exhausted = False
            while run.stopped is None:
                # data: take grad_accum_steps loader batches (time blocked here = data wait)
                t0 = time.perf_counter()
                group = [self.engine.to_device(b) for b in itertools.islice(batches, self.config.grad_accum_steps)]
                data_wait_ms = (time.perf_counter() - t0) * 1e3
                if len(group) < self.config.grad_accum_steps:
                    exhausted = True  # a short tail group is dropped: it would change the batch size
                    break
                self._step(run, group, data_wait_ms)
            self._end_epoch(run, val_loader, exhausted)
        return self._finish(run)

    def _start(self, train_loader: Iterable | Dataset, capture: OomCapture) -> _Run:
        cfg, rob = self.config, self.config.robust
        loader = prepare_loader(train_loader, cfg, self.env, self.device)
        per_device = getattr(loader, "batch_size", None) or cfg.batch_size
        world = self.parallel.world_size
        global_batch = (per_device or 0) * cfg.grad_accum_steps * world
        lr_scale = lr_scale_factor(cfg.lr_scaling, global_batch, cfg.base_batch_size)
        scale_lr(self.optimizer, self.scheduler, lr_scale)
        if cfg.seed is not None:  # one seed per rank: dropout masks differ across ranks, as they should
            torch.manual_seed(cfg.seed + self.env.rank)
            random.seed(cfg.seed + self.env.rank)
        return _Run(loader=loader, per_device=per_device, global_batch=global_batch,
                    lr_scale=lr_scale, split=MicroBatchSplit(per_device, rob.min_micro_batch),
                    tracker=StepTracker(self.env.rank, self.device, self.observers), clock=RunClock(),
                    oom_capture=capture, oom_recover=rob.oom_recover if rob.oom_recover is not None else world == 1,
                    flops_per_sample=cfg.log.flops_per_sample)

    def _resume(self, run: _Run) -> None:
        """Model, optimizer, scaler, scheduler, progress and RNG from the newest checkpoint that
        loads (a corrupt one is moved aside): what makes ``torchrun --max-restarts`` continue."""
        c = self.config.checkpoint
        found = self.engine.load_newest(c.dir) if c.dir and c.resume == "auto" else None
        if found is None:
            return
        _, state = found
        if self.scheduler is not None and state.get("scheduler") is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        p = state["progress"]
        run.epoch, run.step, run.skip_batches, run.split.split = p["epoch"], p["step"], p["batch_in_epoch"], p["split"]
        run.resumed_from = run.step
        if len(state["rng"]) == self.env.world_size:  # another world size: RNG streams cannot match
            run.epoch_rng, run.resume_rng = state["epoch_rng"][self.env.rank], state["rng"][self.env.rank]

    def _begin_epoch(self, run: _Run) -> Iterator:
        """The epoch's data order: ``set_epoch`` reshuffles; on resume, replay the epoch-start RNG so
        the loader draws the same order, fast-forward past the batches already trained on, then put
        the RNG back where the checkpoint left it."""
        loader = run.loader
        set_epoch(loader, run.epoch)
        if run.epoch_rng is not None:  # resuming mid-epoch
            ckpt.set_rng_state(run.epoch_rng)
        elif run.resume_rng is not None:  # resuming at an epoch boundary
            ckpt.set_rng_state(run.resume_rng)
            run.resume_rng = None
        run.epoch_rng = ckpt.rng_state()
        batches = iter_from(loader, run.skip_batches)
        if run.resume_rng is not None:
            ckpt.set_rng_state(run.resume_rng)
            run.resume_rng = None
        run.batch_in_epoch, run.skip_batches = run.skip_batches, 0
        return batches

    def _step(self, run: _Run, group: list[Any], data_wait_ms: float) -> None:
        """One optimizer step over ``group``: forward+backward (halving the micro-batch on OOM), the
        guarded optimizer step, the step record, and the checkpoint when one is due."""
        cfg, rob, world = self.config, self.config.robust, self.parallel.world_size
        if run.flops_per_sample is None and self.device.type == "cuda" and not run.flops_tried:
            run.flops_tried = True
            run.flops_per_sample = self.engine.count_flops(self.loss_fn, self.unpack, group[0])
        run.tracker.step_start()
        run.oom_capture.step_started(run.step)
        while True:
            note = ""
            try:
                loss, micro_steps = self._forward_backward(group, run.split.split)
                oom = 0
            except torch.OutOfMemoryError as exc:
                # the evidence (files; history for a repeat OOM) before memory is freed
                retry = run.oom_recover and run.split.can_halve(batch_size_of(group[0]))
                note = run.oom_capture.on_oom(exc, run.step, recovering=retry)
                if not run.oom_recover:
                    raise
                loss, oom = None, 1
            if run.oom_recover and world > 1:
                oom = self.parallel.all_reduce_max(oom)  # SYNC + collective: all ranks agree
            if not oom:
                break
            free_memory(self.optimizer)
            run.split.halve(batch_size_of(group[0]), note=note)

        # optimizer step (unscale -> clip -> step -> update), guarded against NaN/inf
        do_step = True
        if rob.nonfinite == "skip":
            bad = int(not bool(torch.isfinite(loss)))  # SYNC: reads the loss on the host
            do_step = not self.parallel.all_reduce_max(bad)
        stepped = self.engine.clip_and_step(self.scheduler) if do_step else self.engine.skip_step()
        run.skipped += not stepped
        run.consecutive_skips = 0 if stepped else run.consecutive_skips + 1
        if rob.nonfinite == "skip" and run.consecutive_skips >= rob.max_skips:
            raise skip_streak_error(run.consecutive_skips, run.step, self.env.rank)

        # bookkeeping: the record is completed lazily, when the GPU gets there (no sync)
        t_now, wall = time.perf_counter(), time.time()
        n = (batch_size_of(group[0]) or 0) * len(group)
        run.samples += n
        scaled = self.precision.scaler.is_enabled()
        run.tracker.step_end(StepRecord(
            rank=self.env.rank, step=run.step, t_end_s=wall, step_ms=(t_now - run.t_last) * 1e3,
            data_wait_ms=data_wait_ms, samples=n, micro_steps=micro_steps,
            scaler_scale=self.precision.scale_value() if scaled else None,
            scaler_skipped=(not stepped) if scaled else None,
        ), loss, self.precision.last_grad_norm if stepped else None)
        run.t_last = t_now
        if run.clock.first_batch_s is None:
            run.clock.first_batch_s = data_wait_ms / 1e3
        run.step += 1
        run.steps_run += 1
        run.batch_in_epoch += len(group)
        if run.steps_run == cfg.log.warmup_steps:  # the steady state starts where the GPU really is
            run.tracker.flush()  # SYNC (once per fit)
            run.clock.begin_steady()
        else:
            run.clock.step_done(n)
        if rob.nonfinite == "stop" and run.tracker.nonfinite_steps:
            self._stop_nonfinite(run.tracker)
        if run.step % cfg.log.every_steps == 0:
            run.bar.update(run.step, run.tracker.last_loss, run.samples * world / (t_now - run.clock.t0))
        if cfg.max_steps is not None and run.step >= cfg.max_steps:
            run.stopped = f"max_steps={cfg.max_steps} reached"
        if run.term.agreed(run.step, self.parallel, cfg.log.every_steps):
            run.stopped = TERM_REASON
        if cfg.checkpoint.every_steps and run.step % cfg.checkpoint.every_steps == 0:
            self._save(run)

    def _end_epoch(self, run: _Run, val_loader: Iterable | None, exhausted: bool) -> None:
        """An epoch ends when its iterator is exhausted (or a sized loader's batches are all used);
        a run stopped earlier (``max_steps``) keeps the epoch open: no validation, and the
        checkpoint records the same epoch and the position in it."""
        if not (exhausted or (loader_len(run.loader) and run.batch_in_epoch >= loader_len(run.loader))):
            return
        run.epoch += 1
        if val_loader is not None:
            run.tracker.flush()  # SYNC: the pending steps are training time, not evaluation time
            run.clock.pause()
            run.val_loss = self.evaluate(val_loader)
            run.clock.resume()
            run.t_last = time.perf_counter()
        run.batch_in_epoch, run.epoch_rng = 0, None

    def _finish(self, run: _Run) -> FitResult:
        cfg, world = self.config, self.parallel.world_size
        run.tracker.flush()  # SYNC: wait for the GPU, emit the last records
        if cfg.robust.nonfinite == "stop" and run.tracker.nonfinite_steps:
            self._stop_nonfinite(run.tracker)
        elapsed = run.clock.stop()
        if cfg.checkpoint.dir is not None:
            self._save(run)
        run.bar.close()
        if run.stopped == TERM_REASON and self.is_main:
            write_term_message(cfg.checkpoint.dir, run.step)
        for obs in self.observers:
            obs.on_run_end(run.tracker.emitted)

        # Metrics reduced over ranks (one collective + SYNC at the end of the run)
        train_loss = run.tracker.last_loss
        if world > 1 and train_loss is not None:
            train_loss = float(self.parallel.mean(torch.tensor(train_loss, device=self.device)))
        clock = run.clock
        overall = run.samples / elapsed if elapsed > 0 else 0.0
        steady = clock.steady_samples / clock.steady_s if clock.steady_steps and clock.steady_s > 0 else None
        rate = steady if steady is not None else overall
        util, why = mfu(run.flops_per_sample, rate, self.device, self.precision.peak_dtype)
        result = FitResult(
            steps=run.step, epochs_completed=run.epoch, samples=run.samples * world, elapsed_s=elapsed,
            samples_per_s=rate * world, global_batch=run.global_batch, per_device_batch=run.per_device,
            grad_accum_steps=cfg.grad_accum_steps, world_size=world, precision=self.precision.dtype_name,
            strategy=self.parallel.strategy, micro_batch_split=run.split.split, skipped_steps=run.skipped,
            resumed_from_step=run.resumed_from, train_loss=train_loss, val_loss=run.val_loss,
            flops_per_sample=run.flops_per_sample, mfu=util, mfu_reason=why, lr_scale=run.lr_scale,
            stopped_reason=run.stopped, overall_samples_per_s=overall * world,
            steady_steps=clock.steady_steps if steady is not None else 0, warmup_steps=cfg.log.warmup_steps,
            startup_s=clock.startup_s, first_batch_s=clock.first_batch_s)
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
            weight = (batch_size_of(mb) or 1) / total  # micro-batch means -> the whole step's mean
            # gradients are all-reduced only on the last micro-step (no_sync before it)
            with self.engine.no_sync(last_micro_step=i == len(micro) - 1):
                loss = self.engine.forward_loss(self.loss_fn, inputs, target)  # fp32, compiled with the model
                self.engine.backward(loss * weight if weight != 1.0 else loss)
            loss_sum += loss.detach() * weight
        return loss_sum, len(micro)

    def evaluate(self, loader: Iterable) -> float:
        """Mean loss over ``loader`` (averaged over ranks; one SYNC at the end)."""
        self.model.eval()
        total = torch.zeros((), device=self.device)
        count = torch.zeros((), device=self.device)
        with torch.no_grad():
            for batch in loader:
                inputs, target = self.unpack(self.engine.to_device(batch))
                n = batch_size_of(target) or 1
                total += self.engine.forward_loss(self.loss_fn, inputs, target).detach() * n
                count += n
        self.model.train()
        both = self.parallel.mean(torch.stack([total, count]))
        return float(both[0] / both[1])  # SYNC

    # ----------------------------------------------------------------------------- helpers
    def _stop_nonfinite(self, tracker: StepTracker) -> None:
        raise nonfinite_error(tracker.nonfinite_steps[0], self.env.rank)

    def _save(self, run: _Run) -> None:
        """Write a checkpoint (rank 0; every rank contributes its RNG state). One SYNC: the pending
        step records are flushed first so a NaN loss is caught before it is saved."""
        run.tracker.flush()
        if self.config.robust.nonfinite == "stop" and run.tracker.nonfinite_steps:
            self._stop_nonfinite(run.tracker)
        run.clock.pause()  # writing is not training time
        folder = self.config.checkpoint.dir
        self.engine.save(
            ckpt.checkpoint_path(folder, run.step),
            scheduler=self.scheduler.state_dict() if self.scheduler is not None else None,
            progress={"epoch": run.epoch, "step": run.step, "batch_in_epoch": run.batch_in_epoch,
                      "split": run.split.split},
            rng=self.parallel.gather_objects(ckpt.rng_state()),
            epoch_rng=self.parallel.gather_objects(run.epoch_rng))
        if self.is_main:
            ckpt.prune(folder, self.config.checkpoint.keep_last)
        run.clock.resume()
        run.t_last = time.perf_counter()
