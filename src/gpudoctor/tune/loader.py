"""The loader knob: the cheapest DataLoader setting that keeps up with the GPU, chosen above the noise.

The aim is the GPU's consumption rate: the samples/s of real steps with the data already on the
device (measured by the batch knob, or here when it did not run). Rules of thumb are not used
(``num_workers = cores / 2``, ``prefetch_factor = num_workers * 2``: the seeds' advice, often wrong
on a given machine). Stages, each on real training steps fed by the real loader:

1. ``num_workers``: a search with one run per count, from the CPUs this rank may use down through
   ..., 4, 2, 1, 0, until a count no longer keeps up (slower than the best by more than the
   tolerance, and below 90% of the GPU's rate); the fewest workers within the tolerance of the best
   are the search's pick. One run of a loader setting is noisy (on an H200 two single runs of 8
   workers measured 5,632 and 6,110 samples/s), so the pick is then checked against the next
   cheaper count (or the starting count, when nothing cheaper exists), both run ``repeats`` times
   interleaved: the pick is kept only when it beats the cheaper count beyond the noise;
2. ``prefetch_factor`` 2 against 4 at the chosen workers;
3. ``pin_memory`` off against on (CUDA only);
4. ``persistent_workers``: the wait for the first batch of the next epoch, off then on, each
   ``repeats`` times interleaved (no model is built: a second or two each); the median wait decides;
5. ``multiprocessing_context="forkserver"`` against the default start method (``fork`` on Linux):
   forkserver workers inherit nothing from the training process (no copy-on-write growth of a
   large in-memory dataset, no CUDA state) but pickle the dataset once per worker (the memory it
   saves is not measured here).

Every pair (1, 2, 3 and 5) runs both arms ``repeats`` times, interleaved, through
:meth:`~gpudoctor.tune.session.TuneContext.measure` and is decided as the precision stage decides
(:func:`~gpudoctor.tune.noise.pick`: round by round, against the tolerance or the rounds' own
spread when larger): the dearer arm (more workers, a deeper queue, pinned pages, a forkserver) is
kept only when it is faster than the cheaper one beyond the noise; a winner inside the noise is not
a winner. Each row shows its runs' spread; each pair's note states the gain and the noise band.
Under torchrun every rank measures on its own and rank 0's choice is agreed. A loader trial is
timed past its warm-up (workers started, queues filled) over about 3 s of the GPU's work (or one
epoch), so a loader that cannot keep up drains its queue inside the window; the cost of starting
workers at each epoch is measured on its own (step 4).
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

from gpudoctor.records.tune import KnobResult, Trial, TrialVerdict
from gpudoctor.tune.noise import Measured, compare, pick, rotated, summarize
from gpudoctor.tune.search import pick_cheapest
from gpudoctor.tune.session import TuneContext, measured
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


def input_bound(ctx: TuneContext) -> float | None:
    """The rate the loader feeds when it is below what the GPU takes (``KEEPS_UP``), else ``None``."""
    gpu = gpu_rate(ctx)
    return ctx.fed_rate if ctx.fed_rate and gpu and ctx.fed_rate < KEEPS_UP * gpu else None


def gpu_rate(ctx: TuneContext) -> float | None:
    """What the GPU takes with the data on the device: measured at the batch picked so far, else the
    reference trial's."""
    return ctx.consumption_rate or ctx.reference_rate


def _rate(trial: Trial) -> float | None:
    return trial.samples_per_s if trial.verdict is TrialVerdict.OK else None


def loader_steps(ctx: TuneContext, batch: int, rate: float | None = None) -> int:
    """Measured steps per run through the loader: one epoch of this rank's shard or about 3 s at
    ``rate`` (default: the GPU's consumption rate), whichever is shorter, at least 4: long enough to
    drain the prefetch queue."""
    rate = rate or ctx.consumption_rate
    per_epoch = max(1, len(ctx.target.train_dataset) // ctx.world_size // batch)
    by_time = math.ceil(3.0 * rate / batch) if rate else ctx.options.steps
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


def _workers(n: int) -> str:
    return f"{n} worker" + ("" if n == 1 else "s")


def partner_count(workers: int, counts: list[int], start: int) -> int | None:
    """The count the sweep's pick is checked against: the next cheaper one among the sweep's
    counts and the starting count; the starting count when nothing is cheaper; ``None`` when the
    pick is the starting count and nothing is cheaper."""
    cheaper = [c for c in {*counts, start} if c < workers]
    if cheaper:
        return max(cheaper)
    return start if start != workers else None


def _words(cheap: Measured | None, dear: Measured | None, tolerance: float) -> str:
    """A pair's figures in words: both arms' medians and spreads, the gain round by round, the noise."""
    if cheap is None or dear is None:
        return "the " + ("cheaper" if cheap is None else "dearer") + " arm failed"
    gain, margin = compare(dear, cheap, tolerance)
    return (f"{dear.median:,.0f} ±{dear.spread:.1%} vs {cheap.median:,.0f} ±{cheap.spread:.1%} samples/s over "
            f"{len(dear.rates)} interleaved runs each, {gain:.2f}x round by round (noise ±{margin:.0%})")


def _epoch_starts(ctx: TuneContext, settings: LoaderSettings, batch: int) -> dict[bool, list[float]]:
    """The first-batch wait of an epoch with fresh and with persistent workers, ``repeats`` times
    each, interleaved (round r starts with the other arm than round r - 1)."""
    waits: dict[bool, list[float]] = {False: [], True: []}
    for r in range(ctx.options.repeats):
        for persistent in rotated([False, True], r):
            waits[persistent].append(_epoch_start_ms(ctx, settings.replace(persistent_workers=persistent), batch))
    return waits


def tune_loader(ctx: TuneContext) -> KnobResult:
    """Choose ``num_workers``, ``prefetch_factor``, ``pin_memory``, ``persistent_workers`` and the
    workers' start method."""
    from gpudoctor.train.data import default_num_workers

    first = len(ctx.trials)
    notes: list[str] = []
    batch = ctx.batch_size
    tolerance = ctx.options.tolerance
    if ctx.consumption_rate is None:
        ref = ctx.run(ctx.spec("loader", f"data on GPU, batch={batch}", {}, batch_size=batch))
        ctx.consumption_rate = _rate(ref)
    target = ctx.consumption_rate
    if target:
        notes.append(f"GPU consumption rate (data already on the device): {target:,.0f} samples/s per rank")
    steps = loader_steps(ctx, batch)
    pin = ctx.cuda

    def label(s: LoaderSettings, shown: str = "") -> str:
        """The setting in words: what differs from the sweep's (2 batches prefetched per worker,
        pinned on CUDA, the default start method), and the knob a pair compares (``shown``) always."""
        words = [f"num_workers={s.num_workers}"]
        if s.num_workers and (s.prefetch_factor != 2 or shown == "prefetch_factor"):
            words.append(f"prefetch_factor={s.prefetch_factor}")
        if ctx.cuda and (not s.pin_memory or shown == "pin_memory"):
            words.append(f"pin_memory={'on' if s.pin_memory else 'off'}")
        if s.num_workers and (s.multiprocessing_context or shown == "multiprocessing_context"):
            words.append(f"forkserver={'on' if s.multiprocessing_context == 'forkserver' else 'off'}")
        return " ".join(words)

    def spec(s: LoaderSettings, params: dict[str, Any], setting: str) -> Any:
        # timed past the workers' start and the queues' filling (what an epoch's start costs is
        # measured on its own, step 4): the steady rate the loader sustains
        return ctx.spec("loader", setting, params, mode="loader", batch_size=batch, loader=s,
                        warmup=ctx.options.warmup + 2, steps=steps)

    def versus(knob: str, cheap: LoaderSettings, dear: LoaderSettings, what: str,
               suffix: str = "") -> tuple[int | None, list[Trial]]:
        """Both arms ``repeats`` times interleaved; 1 when the dearer beats the cheaper beyond the
        noise, 0 when not, ``None`` when neither ran cleanly (rank 0's answer on every rank)."""
        rows = ctx.measure([spec(s, {knob: getattr(s, knob)}, label(s, knob) + suffix) for s in (cheap, dear)])
        arms = [measured(r) for r in rows]
        won = ctx.agree(pick(arms, base=0, tolerance=tolerance)[0])
        verdict = "no arm ran cleanly" if won is None else ("kept" if won == 1 else "not kept")
        notes.append(f"{what}: {_words(arms[0], arms[1], tolerance)}: {verdict}")
        return won, rows

    # 1. workers, from the most this rank may use downwards: the fast settings run first, and the
    #    sweep stops at the first count that no longer keeps up (slow 0/1-worker trials are skipped
    #    when they cannot win anyway); one run each: the pick is checked with repeats below
    base = ctx.loader.replace(prefetch_factor=2, pin_memory=pin, persistent_workers=True)
    counts = worker_counts(default_num_workers())
    swept: list[tuple[int, Trial]] = []
    for w in reversed(counts):
        t = ctx.run(spec(base.replace(num_workers=w), {"num_workers": w}, label(base.replace(num_workers=w))))
        swept.append((w, t))
        rates = [_rate(x) or 0.0 for _, x in swept]
        rate = _rate(t) or 0.0
        if max(rates) > 0 and rate < max(rates) * (1 - tolerance) and not (target and rate >= KEEPS_UP * target):
            notes.append(f"{_workers(w)} no longer keep{'s' if w == 1 else ''} up ({rate:,.0f} vs {max(rates):,.0f} "
                         "samples/s, one run each): the sweep stopped there")
            break
    swept.reverse()  # cost order: fewest workers first
    picked = pick_cheapest([_rate(t) for _, t in swept], tolerance=tolerance)
    # ranks may have stopped the sweep at different counts: agree on rank 0's count, not an index
    workers = ctx.agree(None if picked is None else swept[picked][0])
    if workers is None:
        return KnobResult(knob="loader", trials=tuple(ctx.trials[first:]), notes=tuple(notes),
                          summary="no loader setting ran cleanly; see the reasons in the table")
    best = next((t for w, t in swept if w == workers), swept[-1][1])
    start = ctx.loader.num_workers if ctx.loader.num_workers is not None else default_num_workers()
    partner = ctx.agree(partner_count(workers, counts, start))
    if partner is not None:
        lo, hi = sorted((partner, workers))
        won, rows = versus("num_workers", base.replace(num_workers=lo), base.replace(num_workers=hi),
                           f"{_workers(hi)} against {lo} (the sweep picked {workers})", " (repeated)")
        if won is not None:
            workers, best = (lo, hi)[won], rows[won]
    settings = base.replace(num_workers=workers)

    # 2. prefetch_factor and 3. pin_memory: the cheaper value first
    if workers > 0:
        won, rows = versus("prefetch_factor", settings, settings.replace(prefetch_factor=4),
                           "prefetch_factor 4 against 2")
        if won is not None:
            settings, best = settings.replace(prefetch_factor=(2, 4)[won]), rows[won]
    if ctx.cuda:
        won, rows = versus("pin_memory", settings.replace(pin_memory=False), settings.replace(pin_memory=True),
                           "pin_memory on against off")
        if won is not None:
            settings, best = settings.replace(pin_memory=won == 1), rows[won]
    else:
        settings = settings.replace(pin_memory=False)
        ctx.skip("loader", "pin_memory=on", {"pin_memory": True}, "pinned memory only speeds copies to a CUDA GPU")

    # 4. persistent workers: what re-forking the workers costs at each epoch start
    if workers > 0 and not ctx.out_of_time():
        t0 = time.perf_counter()
        waits = _epoch_starts(ctx, settings, batch)
        wall = (time.perf_counter() - t0) / 2
        for persistent in (False, True):
            t = Trial(knob="loader", setting=f"persistent_workers={'on' if persistent else 'off'} (epoch start)",
                      params={"persistent_workers": persistent}, verdict=TrialVerdict.OK, steps=1,
                      data_wait_ms=statistics.median(waits[persistent]), wall_s=wall)
            ctx.trials.append(t)
            ctx.on_trial(t)
        fresh, kept = (summarize(waits[p]) for p in (False, True))
        keep = ctx.agree(kept is not None and fresh is not None and kept.median < fresh.median * 0.9)
        settings = settings.replace(persistent_workers=bool(keep))
        if fresh is not None and kept is not None:
            notes.append(f"first batch of an epoch (median of {len(fresh.rates)}): {fresh.median:.0f} ms "
                         f"±{fresh.spread:.0%} with fresh workers, {kept.median:.0f} ms ±{kept.spread:.0%} with "
                         "persistent ones")
    # 5. forkserver workers against the default start method
    if workers > 0 and not ctx.out_of_time():
        import multiprocessing

        if "forkserver" in multiprocessing.get_all_start_methods():
            won, rows = versus("multiprocessing_context", settings,
                               settings.replace(multiprocessing_context="forkserver"),
                               "forkserver workers against the default start method")
            if won is not None:
                settings = settings.replace(multiprocessing_context=(None, "forkserver")[won])
                best = rows[won]
        else:
            ctx.skip("loader", "multiprocessing_context=forkserver", {"multiprocessing_context": "forkserver"},
                     "this platform has no forkserver start method")
    ctx.loader = settings.replace(eval_batch_size=ctx.loader.eval_batch_size)
    rate = _rate(best)
    ctx.fed_rate = rate or ctx.fed_rate
    figure = ""
    if rate:
        figure = f"; {rate:,.0f} samples/s" + (f" ±{best.spread:.1%} over {len(best.rates)} runs"
                                              if best.spread is not None else " (one run)")
    if rate and target:
        figure += f", {rate / target:.0%} of the GPU's rate" + (" (still input-bound: move augmentation to the GPU)"
                                                                if rate < KEEPS_UP * target else "")
    params = {"num_workers": settings.num_workers, "prefetch_factor": settings.prefetch_factor,
              "pin_memory": settings.pin_memory, "persistent_workers": settings.persistent_workers,
              "multiprocessing_context": settings.multiprocessing_context}
    return KnobResult(knob="loader", trials=tuple(ctx.trials[first:]), winner=best.setting, params=params,
                      summary=_settings_text(settings) + figure, notes=tuple(notes))


def _settings_text(settings: LoaderSettings) -> str:
    """The chosen settings as the table says them: without workers, the batches load in the training
    process and the worker-only knobs (prefetch, persistent workers) do not apply."""
    if settings.num_workers == 0:
        return f"num_workers=0 (batches load in the training process) pin_memory={settings.pin_memory}"
    return (f"num_workers={settings.num_workers} prefetch_factor={settings.prefetch_factor} "
            f"pin_memory={settings.pin_memory} persistent_workers={settings.persistent_workers}")
