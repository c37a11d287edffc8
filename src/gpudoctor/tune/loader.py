"""The loader knob: the cheapest DataLoader setting that keeps up with the GPU.

The aim is the GPU's consumption rate: the samples/s of real steps with the data already on the
device (measured by the batch knob, or here when it did not run). Rules of thumb are not used
(``num_workers = cores / 2``, ``prefetch_factor = num_workers * 2``: the seeds' advice, often wrong
on a given machine). Stages, each on real training steps fed by the real loader:

1. ``num_workers``: from the CPUs this rank may use down through ..., 4, 2, 1, 0, until a count no
   longer keeps up (slower than the best by more than the tolerance, and below 90% of the GPU's
   rate); the fewest workers within the tolerance of the best win;
2. ``prefetch_factor``: 2 then 4 at the chosen workers;
3. ``pin_memory`` off then on (CUDA only);
4. ``persistent_workers``: the wait for the first batch of the next epoch, off then on;
5. ``multiprocessing_context="forkserver"`` against the default start method (``fork`` on Linux):
   forkserver workers inherit nothing from the training process (no copy-on-write growth of a
   large in-memory dataset, no CUDA state) but pickle the dataset once per worker; it is kept
   only when it is faster beyond the tolerance (the memory it saves is not measured here).

Each stage keeps the cheapest setting within the tolerance of the fastest. A loader trial is timed
past its warm-up (workers started, queues filled) over about 3 s of the GPU's work (or one epoch),
so a loader that cannot keep up drains its queue inside the window; the cost of starting workers
at each epoch is measured on its own (step 4).
"""

from __future__ import annotations

import math
import time
from typing import Any

from gpudoctor.records.tune import KnobResult, Trial, TrialVerdict
from gpudoctor.tune.search import pick_cheapest
from gpudoctor.tune.session import TuneContext
from gpudoctor.tune.target import LoaderSettings
from gpudoctor.tune.trials import make_loader

KEEPS_UP = 0.90  # a loader delivering 90% of the GPU's rate has removed the data wait


def worker_counts(max_workers: int) -> list[int]:
    """0, 1, 2, 4, 8, ... and ``max_workers`` itself."""
    counts, n = [0, 1], 2
    while n < max_workers:
        counts.append(n)
        n *= 2
    if max_workers > 1:
        counts.append(max_workers)
    return sorted(set(c for c in counts if c <= max(max_workers, 0)))


def _rate(trial: Trial) -> float | None:
    return trial.samples_per_s if trial.verdict is TrialVerdict.OK else None


def _steps(ctx: TuneContext, batch: int) -> int:
    """Measured steps per loader trial: one epoch of this rank's shard or about 3 s of the GPU's
    work, whichever is shorter, at least 4: long enough to drain the prefetch queue."""
    per_epoch = max(1, len(ctx.target.train_dataset) // ctx.world_size // batch)
    by_time = math.ceil(3.0 * ctx.consumption_rate / batch) if ctx.consumption_rate else ctx.options.steps
    return max(4, min(per_epoch, by_time))


def _epoch_start_ms(ctx: TuneContext, settings: LoaderSettings, batch: int) -> float:
    """Time to the first batch of a second epoch (where non-persistent workers start again).

    The first epoch is consumed to its end, as training does: a persistent worker's ``iter()``
    otherwise waits for the batches still in flight, which a real epoch end never has. A subset
    of three batches keeps that epoch short."""
    from torch.utils.data import Subset

    subset = Subset(ctx.target.train_dataset, range(min(len(ctx.target.train_dataset), 3 * batch)))
    loader = make_loader(subset, batch, settings, seed=ctx.config.seed or 0)
    for _ in loader:
        pass
    t0 = time.perf_counter()
    it = iter(loader)
    next(it)
    elapsed = (time.perf_counter() - t0) * 1e3
    del it, loader
    return elapsed


def tune_loader(ctx: TuneContext) -> KnobResult:
    """Choose ``num_workers``, ``prefetch_factor``, ``pin_memory``, ``persistent_workers`` and the
    workers' start method."""
    from gpudoctor.train.data import default_num_workers

    first = len(ctx.trials)
    notes: list[str] = []
    batch = ctx.batch_size
    if ctx.consumption_rate is None:
        ref = ctx.run(ctx.spec("loader", f"data on GPU, batch={batch}", {}, batch_size=batch))
        ctx.consumption_rate = _rate(ref)
    target = ctx.consumption_rate
    if target:
        notes.append(f"GPU consumption rate (data already on the device): {target:,.0f} samples/s per rank")
    steps = _steps(ctx, batch)
    pin = ctx.cuda

    def trial(settings: LoaderSettings, setting: str, params: dict[str, Any]) -> Trial:
        # timed past the workers' start and the queues' filling (what an epoch's start costs is
        # measured on its own, step 4): the steady rate the loader sustains
        return ctx.run(ctx.spec("loader", setting, params, mode="loader", batch_size=batch, loader=settings,
                                warmup=ctx.options.warmup + 2, steps=steps))

    # 1. workers, from the most this rank may use downwards: the fast settings run first, and the
    #    sweep stops at the first count that no longer keeps up (slow 0/1-worker trials are skipped
    #    when they cannot win anyway)
    base = ctx.loader.replace(prefetch_factor=2, pin_memory=pin, persistent_workers=True)
    measured: list[tuple[int, Trial]] = []
    for w in reversed(worker_counts(default_num_workers())):
        t = trial(base.replace(num_workers=w), f"num_workers={w}", {"num_workers": w})
        measured.append((w, t))
        rates = [_rate(x) or 0.0 for _, x in measured]
        rate = _rate(t) or 0.0
        if max(rates) > 0 and rate < max(rates) * (1 - ctx.options.tolerance) and not (target and rate >= KEEPS_UP * target):
            notes.append(f"{w} workers no longer keep up ({rate:,.0f} vs {max(rates):,.0f} samples/s): stopped there")
            break
    measured.reverse()  # cost order: fewest workers first
    pick = pick_cheapest([_rate(t) for _, t in measured], tolerance=ctx.options.tolerance)
    # ranks may have stopped the sweep at different counts: agree on rank 0's count, not an index
    workers = ctx.agree(None if pick is None else measured[pick][0])
    if workers is None:
        return KnobResult(knob="loader", trials=tuple(ctx.trials[first:]), notes=tuple(notes),
                          summary="no loader setting ran cleanly; see the reasons in the table")
    best = next((t for w, t in measured if w == workers), measured[-1][1])
    settings = base.replace(num_workers=workers)

    # 2. prefetch_factor and 3. pin_memory: the cheaper value first
    if workers > 0:
        t4 = trial(settings.replace(prefetch_factor=4), f"num_workers={workers} prefetch_factor=4", {"prefetch_factor": 4})
        if ctx.agree(pick_cheapest([_rate(best), _rate(t4)], tolerance=ctx.options.tolerance)) == 1:
            settings, best = settings.replace(prefetch_factor=4), t4
    if ctx.cuda:
        unpinned = trial(settings.replace(pin_memory=False), f"num_workers={workers} pin_memory=off",
                         {"pin_memory": False})
        if ctx.agree(pick_cheapest([_rate(unpinned), _rate(best)], tolerance=ctx.options.tolerance)) == 0:
            settings, best = settings.replace(pin_memory=False), unpinned
    else:
        settings = settings.replace(pin_memory=False)
        ctx.skip("loader", "pin_memory=on", {"pin_memory": True}, "pinned memory only speeds copies to a CUDA GPU")

    # 4. persistent workers: what re-forking the workers costs at each epoch start
    if workers > 0 and not ctx.out_of_time():
        waits = {}
        for persistent in (False, True):
            t0 = time.perf_counter()
            wait = _epoch_start_ms(ctx, settings.replace(persistent_workers=persistent), batch)
            waits[persistent] = wait
            t = Trial(knob="loader", setting=f"persistent_workers={'on' if persistent else 'off'} (epoch start)",
                      params={"persistent_workers": persistent}, verdict=TrialVerdict.OK, steps=1,
                      data_wait_ms=wait, wall_s=time.perf_counter() - t0)
            ctx.trials.append(t)
            ctx.on_trial(t)
        keep = ctx.agree(waits[True] < waits[False] * 0.9)
        settings = settings.replace(persistent_workers=bool(keep))
        notes.append(f"first batch of an epoch: {waits[False]:.0f} ms with fresh workers, {waits[True]:.0f} ms "
                     "with persistent ones")
    # 5. forkserver workers against the default start method
    if workers > 0 and not ctx.out_of_time():
        import multiprocessing

        if "forkserver" in multiprocessing.get_all_start_methods():
            fs = trial(settings.replace(multiprocessing_context="forkserver"),
                       f"num_workers={workers} multiprocessing_context=forkserver",
                       {"multiprocessing_context": "forkserver"})
            default_rate, fs_rate = _rate(best), _rate(fs)
            chosen = ctx.agree(pick_cheapest([default_rate, fs_rate], tolerance=ctx.options.tolerance)) == 1
            if chosen:
                settings, best = settings.replace(multiprocessing_context="forkserver"), fs
            notes.append(f"forkserver workers: {fs_rate or 0:,.0f} samples/s against {default_rate or 0:,.0f} "
                         f"with the default start method ({'kept' if chosen else 'not kept'})")
        else:
            ctx.skip("loader", "multiprocessing_context=forkserver", {"multiprocessing_context": "forkserver"},
                     "this platform has no forkserver start method")
    ctx.loader = settings.replace(eval_batch_size=ctx.loader.eval_batch_size)
    rate = _rate(best)
    verdict = ""
    if rate and target:
        verdict = f"; {rate / target:.0%} of the GPU's rate" + (" (still input-bound: move augmentation to the GPU)"
                                                                 if rate < KEEPS_UP * target else "")
    params = {"num_workers": settings.num_workers, "prefetch_factor": settings.prefetch_factor,
              "pin_memory": settings.pin_memory, "persistent_workers": settings.persistent_workers,
              "multiprocessing_context": settings.multiprocessing_context}
    return KnobResult(knob="loader", trials=tuple(ctx.trials[first:]), winner=best.setting if best else None, params=params,
                      summary=f"num_workers={settings.num_workers} prefetch_factor={settings.prefetch_factor} "
                              f"pin_memory={settings.pin_memory} persistent_workers={settings.persistent_workers}"
                              f"{verdict}", notes=tuple(notes))
