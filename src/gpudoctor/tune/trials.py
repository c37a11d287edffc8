"""One trial: build a fresh model and optimizer, run real steps through the engine, measure, clean up.

A trial is classified, never trusted blindly:

* ``torch.OutOfMemoryError`` (by type, never by message text: composer #3397) -> ``oom``;
* ``NonFiniteLossError`` or a non-finite loss -> ``rejected``;
* any other exception -> ``failed``, and on a GPU the process may now be poisoned (a sticky CUDA
  error), so the runner moves every later trial into a fresh subprocess;
* a trial that did not really execute the steps it was asked for -> ``failed`` (Lightning #13696:
  the finder "exhausts the maximum configured trials without actually probing");
* a compile trial that dynamo ran eager (its recompile limit hit) -> ``rejected`` (:mod:`.compile_watch`).

Trials run in this process by default (fast: no new CUDA context per trial) with the memory of the
previous trial released; ``isolation="process"`` runs each in a fresh ``python -m
gpudoctor.tune.trials`` child, so not even allocator fragmentation carries over.

Three kinds of trial: ``train`` (real optimizer steps on batches cached on the device: the GPU's
own consumption rate, no loader in the way; the median step after the warm-up, by
:func:`gpudoctor.analysis.steps.stats_past_warmup`), ``eval`` (the
evaluation pass alone, no gradients) and ``loader`` (real optimizer steps fed by the real
``DataLoader``; the rate of the whole run, worker start and queue filling included).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from gpudoctor.analysis.steps import stats_past_warmup
from gpudoctor.core.memory import release_cached_memory
from gpudoctor.records.step import StepRecord
from gpudoctor.records.tune import Trial, TrialVerdict
from gpudoctor.tune import compile_watch
from gpudoctor.tune.target import LoaderSettings, TuneTarget

RESULT_MARK = "GPUDOCTOR_TRIAL_RESULT "
_POOL_CAP = 2048  # distinct samples kept on the host to build the cached batches from


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrialSpec:
    """One trial as plain data (it crosses into a child process as JSON).

    Attributes:
        knob: the knob being tuned.
        setting: the setting in words (the table's first column).
        params: the setting as values (what the config gets if it wins).
        config: the ``TrainConfig`` for this trial, as ``to_dict()`` data.
        loader: the ``LoaderSettings`` for this trial, as data.
        mode: ``train``, ``eval`` or ``loader``.
        batch_size: per-device batch.
        warmup: steps run before measuring (cuDNN autotuning, allocator warm-up, compile).
        steps: measured steps.
    """

    knob: str
    setting: str
    params: dict[str, Any]
    config: dict[str, Any]
    loader: dict[str, Any]
    mode: str = "train"
    batch_size: int = 32
    warmup: int = 3
    steps: int = 10

    def __post_init__(self) -> None:
        if self.mode not in ("train", "eval", "loader"):
            raise ValueError(f"mode={self.mode!r}: use train, eval or loader")
        if self.batch_size < 1 or self.steps < 1 or self.warmup < 0:
            raise ValueError("batch_size and steps must be >= 1 and warmup >= 0")


class _Collect:
    """An engine observer keeping the step records of one trial."""

    def __init__(self) -> None:
        self.records: list[StepRecord] = []

    def on_run_start(self, info: dict) -> None:
        pass

    def on_step_end(self, record: StepRecord) -> None:
        self.records.append(record)

    def on_run_end(self, records_emitted: int) -> None:
        pass


class _Cycle:
    """``n`` batches taken in turn from a few cached ones (an iterable with a length, as the engine wants)."""

    def __init__(self, batches: list[Any], n: int) -> None:
        self.batches, self.n, self.yielded = batches, n, 0

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[Any]:
        for i in range(self.n):
            self.yielded += 1
            yield self.batches[i % len(self.batches)]


def _index(batch: Any, idx: Any) -> Any:
    import torch

    if isinstance(batch, torch.Tensor):
        return batch[idx]
    if isinstance(batch, dict):
        return type(batch)({k: _index(v, idx) for k, v in batch.items()})
    if isinstance(batch, (list, tuple)):
        items = [_index(v, idx) for v in batch]
        return type(batch)(*items) if hasattr(batch, "_fields") else type(batch)(items)
    return batch


class SamplePool:
    """Up to ``cap`` collated samples of a dataset, kept on the host; batches of any size are drawn
    from it (with repetition), so probing a batch of 8192 costs one collation of ``cap`` samples."""

    def __init__(self, dataset: Any, *, cap: int = _POOL_CAP, seed: int = 0) -> None:
        import torch
        from torch.utils.data import default_collate

        g = torch.Generator().manual_seed(seed)
        n = min(len(dataset), cap)
        order = torch.randperm(len(dataset), generator=g)[:n].tolist()
        self.data = default_collate([dataset[i] for i in order])
        self.size = n
        self.generator = g

    def batch(self, size: int) -> Any:
        import torch

        idx = torch.randint(0, self.size, (size,), generator=self.generator)
        return _index(self.data, idx)


def make_loader(dataset: Any, batch_size: int, settings: LoaderSettings, *, seed: int = 0, shuffle: bool = True,
                drop_last: bool = True) -> Any:
    """The engine's ``fast_loader`` with every loader knob settable (``persistent_workers`` too)."""
    import torch
    from torch.utils.data import DataLoader

    from gpudoctor.train.data import ResumableSampler, default_num_workers

    workers = default_num_workers() if settings.num_workers is None else settings.num_workers
    extra: dict[str, Any] = {}
    if workers > 0:
        extra = {"persistent_workers": settings.persistent_workers, "prefetch_factor": settings.prefetch_factor,
                 "multiprocessing_context": settings.multiprocessing_context}
    pin = torch.cuda.is_available() if settings.pin_memory is None else settings.pin_memory
    return DataLoader(dataset, batch_size=batch_size, sampler=ResumableSampler(dataset, shuffle=shuffle, seed=seed,
                      drop_last=drop_last), num_workers=workers, pin_memory=pin, drop_last=drop_last, **extra)


def execute(target: TuneTarget, spec: TrialSpec, pools: dict[str, SamplePool]) -> Trial:
    """Run ``spec`` in this process and classify how it ended (``KeyboardInterrupt`` passes through)."""
    return _execute(target, spec, pools)[0]


def _execute(target: TuneTarget, spec: TrialSpec, pools: dict[str, SamplePool]) -> tuple[Trial, bool]:
    """The trial and whether it failed in a way that may have poisoned this process (a runtime
    error other than OOM: a CUDA error stays set in the context)."""
    import torch

    from gpudoctor.train.stops import NonFiniteLossError

    started = time.perf_counter()
    base = dict(knob=spec.knob, setting=spec.setting, params=spec.params)
    poisoned = False
    try:
        measured = _measure(target, spec, pools)
    except torch.OutOfMemoryError:
        verdict, reason, measured = TrialVerdict.OOM, "out of memory (torch.OutOfMemoryError)", None
    except NonFiniteLossError as exc:
        verdict, reason, measured = TrialVerdict.REJECTED, f"non-finite loss: {exc}"[:300], None
    except KeyboardInterrupt:
        release_cached_memory()
        raise
    except Exception as exc:  # noqa: BLE001 - any other failure is this trial's verdict, not the tuner's
        verdict, reason, measured = TrialVerdict.FAILED, f"{type(exc).__name__}: {exc}"[:300], None
        poisoned = isinstance(exc, RuntimeError) and not isinstance(exc, NotImplementedError)
    else:
        verdict, reason = TrialVerdict.OK, ""
    finally:
        release_cached_memory()
    wall = time.perf_counter() - started
    if measured is None:
        return Trial(**base, verdict=verdict, reason=reason, wall_s=wall), poisoned
    if fell_back := measured.pop("fell_back", ""):  # ran eager, not compiled: no compile figure (compile_watch.py)
        return Trial(**base, verdict=TrialVerdict.REJECTED, reason=fell_back, steps=measured["steps"],
                     wall_s=wall), False
    if measured["steps"] < spec.warmup + spec.steps:
        return Trial(**base, verdict=TrialVerdict.FAILED, steps=measured["steps"], wall_s=wall,
                     reason=f"ran {measured['steps']} of {spec.warmup + spec.steps} steps: the trial did not "
                     "really execute"), False
    loss = measured.get("loss")
    if loss is not None and not math.isfinite(loss):
        return Trial(**base, verdict=TrialVerdict.REJECTED, reason="non-finite loss", steps=measured["steps"],
                     loss=loss, wall_s=wall), False
    return Trial(**base, verdict=TrialVerdict.OK, wall_s=wall, **measured), False


def _measure(target: TuneTarget, spec: TrialSpec, pools: dict[str, SamplePool]) -> dict[str, Any]:
    """The trial's figures; ``fell_back``: why a compile trial is void (dynamo ran it eager), or ""."""
    model = target.model_factory()
    with compile_watch.watch(model, compiling=bool(spec.config.get("perf", {}).get("compile"))) as dynamo:
        out = _measure_model(model, target, spec, pools)
    return {**out, "fell_back": dynamo.reason}


def _measure_model(model: Any, target: TuneTarget, spec: TrialSpec, pools: dict[str, SamplePool]) -> dict[str, Any]:
    import torch

    from gpudoctor.train.config import TrainConfig
    from gpudoctor.train.data import move_to_device
    from gpudoctor.train.loop import Trainer, default_unpack

    total = spec.warmup + spec.steps
    cfg = TrainConfig.from_dict(spec.config).replace(batch_size=spec.batch_size, max_steps=total)
    collect = _Collect()
    trainer = Trainer(model, target.optimizer_factory, target.loss_fn, config=cfg,
                      observers=[collect], unpack=target.unpack or default_unpack)
    device = trainer.device
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    out: dict[str, Any] = {}
    if spec.mode == "eval":
        pool = pools["eval"]
        batches = [move_to_device(pool.batch(spec.batch_size), device) for _ in range(2)]
        warm = _Cycle(batches, max(spec.warmup, 1))
        trainer.evaluate(warm)  # SYNC inside (float of the loss): cuDNN picks its algorithms here
        timed = _Cycle(batches, spec.steps)
        t0 = time.perf_counter()
        loss = trainer.evaluate(timed)  # SYNC: ends when the GPU is done
        elapsed = time.perf_counter() - t0
        out.update(steps=warm.yielded + timed.yielded, loss=loss,
                   samples_per_s=spec.batch_size * spec.steps / elapsed if elapsed > 0 else None,
                   step_ms=elapsed * 1e3 / spec.steps)
    else:
        if spec.mode == "train":
            pool = pools["train"]
            # two batches copied to the device once: the steps measure the GPU alone
            data: Any = _Cycle([move_to_device(pool.batch(spec.batch_size), device) for _ in range(2)], total)
        else:
            settings = LoaderSettings.from_dict(spec.loader)
            if cfg.perf.compile:
                # A loader trial's rate is that of the whole run: compile first, on two steps of a
                # cached batch, or the compile would be timed as the loader's.
                trainer.fit(_Cycle([move_to_device(pools["train"].batch(spec.batch_size), device)], 2), epochs=1)
                collect.records.clear()
            data = make_loader(target.train_dataset, spec.batch_size, settings, seed=cfg.seed or 0)
        epochs = max(1, math.ceil(total / max(len(data), 1)) + 1)
        result = trainer.fit(data, epochs=epochs)  # ends with a SYNC (the tracker's flush)
        del data
        # the steps past the trial's own warm-up, by the one definition (analysis/steps.py)
        stats = stats_past_warmup(collect.records, spec.warmup)
        if spec.mode == "loader" and spec.warmup > 0 and stats is not None and len(collect.records) > spec.warmup:
            # Steady state: from the end of the last warm-up step (workers started, queues filled,
            # cuDNN and compile done) to the end of the last step; the loader still has to keep up
            # over at least a few seconds of steps (the caller sizes them).
            records = sorted(collect.records, key=lambda r: r.step)
            span = records[-1].t_end_s - records[spec.warmup - 1].t_end_s
            samples = stats.total_samples if stats.total_samples is not None else spec.batch_size * stats.n_used
            step_ms = span * 1e3 / stats.n_used if span > 0 else None
            rate = samples / span if span > 0 else None
        elif spec.mode == "loader":
            # The whole run, from the loader's first batch (workers starting, queues filling) to
            # the last step's end on the GPU: a few steps served from a full prefetch queue would
            # otherwise hide a loader that cannot keep up.
            step_ms = result.elapsed_s * 1e3 / max(result.steps, 1)
            rate = result.overall_samples_per_s or None
        else:
            # the slower of the host's and the GPU's median step (each a median of the steady steps)
            host, gpu = (None, None) if stats is None else (stats.step_ms, stats.gpu_ms)
            step_ms = max(v for v in (host, gpu, 0.0) if v is not None) or None
            rate = spec.batch_size * 1e3 / step_ms if step_ms else None
        out.update(steps=min(result.steps, len(collect.records)), loss=result.train_loss,
                   step_ms=step_ms, data_wait_ms=None if stats is None else stats.data_wait_ms,
                   samples_per_s=rate,
                   skipped_steps=result.skipped_steps if cfg.precision.dtype == "fp16" else None,
                   scaler_scale=collect.records[-1].scaler_scale if collect.records else None)
    if cuda:
        out["peak_mem_bytes"] = int(torch.cuda.max_memory_allocated(device))
    del trainer
    return out


class TrialRunner:
    """Runs trials of one target, in this process or each in a fresh one.

    Args:
        target: the loaded target.
        target_ref: its ``module:function`` reference (a child process loads it again).
        isolation: ``auto`` (in this process; after a non-OOM failure on a GPU every later trial
            runs in a fresh process), ``inline`` or ``process``.
        on_trial: called with each finished trial (the progress display).
        timeout_s: a child process trial is stopped after this long.
    """

    def __init__(self, target: TuneTarget, target_ref: str, *, isolation: str = "auto",
                 on_trial: Callable[[Trial], None] | None = None, timeout_s: float = 600.0) -> None:
        if isolation not in ("auto", "inline", "process"):
            raise ValueError(f"isolation={isolation!r}: use auto, inline or process")
        self.target, self.target_ref, self.isolation = target, target_ref, isolation
        self.on_trial = on_trial or (lambda trial: None)
        self.timeout_s = timeout_s
        self._pools: dict[str, SamplePool] = {}

    def pools(self) -> dict[str, SamplePool]:
        if not self._pools:
            seed = self.target.config.seed or 0
            self._pools["train"] = SamplePool(self.target.train_dataset, seed=seed)
            if self.target.eval_dataset is not None:
                self._pools["eval"] = SamplePool(self.target.eval_dataset, seed=seed + 1)
        return self._pools

    def run(self, spec: TrialSpec) -> Trial:
        if self.isolation == "process":
            trial = run_in_subprocess(self.target_ref, spec, timeout_s=self.timeout_s)
        else:
            trial, poisoned = _execute(self.target, spec, self.pools())
            if poisoned and self.isolation == "auto" and _cuda_used():
                self.isolation = "process"  # a sticky CUDA error would poison every later trial
                trial = dataclasses.replace(trial, reason=trial.reason + " (later trials run in fresh processes)")
        self.on_trial(trial)
        return trial


def _cuda_used() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.is_initialized()


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # the target's module must import
    local = env.get("LOCAL_RANK")
    if env.get("WORLD_SIZE", "1") != "1" and local is not None:
        # The child is one plain process on this rank's GPU, not a member of the job.
        visible = env.get("CUDA_VISIBLE_DEVICES")
        gpus = visible.split(",") if visible else [str(i) for i in range(64)]
        env["CUDA_VISIBLE_DEVICES"] = gpus[int(local)] if int(local) < len(gpus) else local
        for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                     "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
            env.pop(name, None)
    return env


def run_in_subprocess(target_ref: str, spec: TrialSpec, *, timeout_s: float = 600.0) -> Trial:
    """Run ``spec`` in a fresh ``python -m gpudoctor.tune.trials`` process; a crash, a hang or a
    poisoned CUDA context ends there, not here."""
    started = time.perf_counter()
    payload = json.dumps({"target": target_ref, "spec": dataclasses.asdict(spec)})
    base = dict(knob=spec.knob, setting=spec.setting, params=spec.params)
    try:
        proc = subprocess.run([sys.executable, "-m", "gpudoctor.tune.trials"], input=payload, text=True,
                              capture_output=True, timeout=timeout_s, env=_child_env())
    except subprocess.TimeoutExpired:
        return Trial(**base, verdict=TrialVerdict.FAILED, reason=f"trial process still running after {timeout_s:g} s",
                     wall_s=time.perf_counter() - started)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            from gpudoctor.records.base import from_dict

            trial = from_dict(Trial, json.loads(line[len(RESULT_MARK):]))
            return dataclasses.replace(trial, wall_s=time.perf_counter() - started)
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return Trial(**base, verdict=TrialVerdict.FAILED, wall_s=time.perf_counter() - started,
                 reason=f"trial process exited with code {proc.returncode} without a result: " + " | ".join(tail)[:300])


def _child_main() -> int:
    from gpudoctor.records.base import to_dict
    from gpudoctor.tune.target import load_target

    request = json.loads(sys.stdin.read())
    target = load_target(request["target"])
    spec = TrialSpec(**request["spec"])
    trial = execute(target, spec, {"train": SamplePool(target.train_dataset, seed=target.config.seed or 0),
                                   **({"eval": SamplePool(target.eval_dataset, seed=(target.config.seed or 0) + 1)}
                                      if target.eval_dataset is not None else {})})
    sys.stdout.write(RESULT_MARK + json.dumps(to_dict(trial)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(_child_main())
