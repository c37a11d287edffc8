"""The batch knob: the largest per-device batch that fits, and the throughput at every size tried.

Grow then bisect (:func:`~gpudoctor.tune.search.grow_then_bisect`) on real training steps
(forward, backward, optimizer step: the optimizer state exists only after the first step, and it
is often what tips a batch over), then keep a safety margin. Near the limit every probe is
expensive (cuDNN benchmarks each new shape: 13-15 s per probe for ResNet-18 at batches of 24k-31k
on an H200, benchmarks/results/tune-resnet18-h200.json of commit b5190a3), so once an OOM has bracketed
the boundary the bracket is narrowed around where the peak memory of the probes that fit says the
limit is (memory grows linearly with the batch; :func:`~gpudoctor.tune.search.linear_limit`): two
probes when the line is right, at worst about twice bisection's when it is far off. The
evaluation pass is probed on its own, after the training search (an eval OOM must not shrink the
train batch: accelerate #1934; an OOM in the eval probe must not corrupt the train result:
Lightning #18985). The search is capped by the dataset (a batch larger than a rank's shard never
runs), by host RAM (batches in flight in the loader: Lightning #11295) and by 65535 (larger
batches hit CUDA launch-dimension limits, pytorch #142228, which are errors, not OOMs). Under
torchrun each rank searches on its own GPU and the ranks take the smallest result (all-reduce MIN).

Which batch is written: by default (``batch_pick="knee"``) the smallest batch whose throughput is
within 10% of the best seen — where the samples/s curve flattens. A batch beyond the knee buys
memory use, not speed, and costs the loader: DataLoader workers each build whole batches, so a
handful of huge batches per epoch leaves workers idle and makes every epoch start wait for a full
batch. ``batch_pick="max"`` (``--pick-batch max``) writes the largest safe batch instead; both are
reported. The written batch is then run once more with more steps: that verifies it and measures
the GPU's consumption rate the loader knob aims for.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gpudoctor.records.tune import KnobResult, TrialVerdict
from gpudoctor.tune.loader import gpu_rate, input_bound, loader_steps
from gpudoctor.tune.noise import pick
from gpudoctor.tune.search import BoundarySearch, grow_then_bisect, knee, linear_limit, narrow
from gpudoctor.tune.session import BudgetSpent, TuneContext, measured

LAUNCH_DIM_CAP = 65535
KNEE_TOLERANCE = 0.10  # the written batch: the smallest within this fraction of the best throughput
FLAT_GAIN = 0.05  # growth stops (knee pick) after two doublings that each gained less than this
_RAM_FRACTION = 0.25  # of the available host RAM the loader's in-flight batches may take


def sample_bytes(pool: Any) -> int:
    """Host bytes of one collated sample (from the pool the trials draw from)."""
    import torch

    total = 0

    def walk(x: Any) -> None:
        nonlocal total
        if isinstance(x, torch.Tensor):
            total += x.element_size() * x.numel()
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)

    walk(pool.data)
    return max(1, total // max(pool.size, 1))


def caps(ctx: TuneContext) -> tuple[int, list[str]]:
    """The largest batch worth trying, and a note for each cap that applies."""
    import psutil

    from gpudoctor.train.data import default_num_workers

    notes: list[str] = []
    shard = len(ctx.target.train_dataset) // ctx.world_size
    limits = {"dataset": shard, "launch": LAUNCH_DIM_CAP}
    workers = ctx.loader.num_workers if ctx.loader.num_workers is not None else default_num_workers()
    in_flight = workers * ctx.loader.prefetch_factor + 2  # worker queues + the batch in use + the one copied
    per_sample = sample_bytes(ctx.runner.pools()["train"])
    limits["ram"] = int(psutil.virtual_memory().available * _RAM_FRACTION / (per_sample * in_flight))
    if ctx.options.max_batch is not None:
        limits["max"] = ctx.options.max_batch
    cap = max(1, min(limits.values()))
    words = {
        "dataset": f"the dataset shard per rank ({shard} samples)",
        "launch": f"{LAUNCH_DIM_CAP} (CUDA launch-dimension limit)",
        "ram": f"host RAM ({in_flight} batches of {per_sample} B/sample in flight may take "
               f"{int(_RAM_FRACTION * 100)}% of the available memory)",
        "max": f"--max-batch {ctx.options.max_batch}",
    }
    for name, value in limits.items():
        if value == cap:
            notes.append(f"search capped at {cap} by {words[name]}")
    return cap, notes


def _capacity(ctx: TuneContext) -> float | None:
    """Bytes a trial in this process can allocate on its GPU: free memory plus what the caching
    allocator holds (after the last trial's ``empty_cache`` that is only what stays for the
    process, which each trial's peak counts too). ``None`` when the trials do not run here (a
    child process per trial: querying would create a CUDA context in this process, taking memory
    from the children) or not on a GPU."""
    if not ctx.cuda or ctx.runner.isolation == "process":
        return None
    import torch

    if not torch.cuda.is_initialized():
        return None
    free, _total = torch.cuda.mem_get_info(ctx.device)  # a driver query, no stream sync
    return float(free + torch.cuda.memory_reserved(ctx.device))


def _search(ctx: TuneContext, mode: str, start: int, cap: int, points: list[tuple[int, float]],
            notes: list[str], *, stop_when_flat: bool = False):
    """Run the boundary search with one trial per probe; ``points`` gets (size, samples/s)."""
    knob = "batch" if mode == "train" else "eval_batch"
    # Memory needs three real steps: the first runs cuDNN's algorithm search for the new shape and
    # creates the optimizer state, the next two run with that state allocated (the peak) and give
    # the throughput. More steps add GPU time, not information about memory.
    warmup, steps = 1, 2
    memory: list[tuple[int, float]] = []  # (size, peak bytes) of the probes that fit

    # Probes run eager: with torch.compile every new batch size would recompile (minutes over a
    # search), and a compiled step needs no more memory than the eager one. The chosen batch is
    # then checked with the real configuration, compile included.
    eager = ctx.config.replace(perf=dataclasses.replace(ctx.config.perf, compile=False))

    def fits(size: int) -> bool:
        trial = ctx.run(ctx.spec(knob, f"{'batch' if mode == 'train' else 'eval batch'}={size}",
                                 {"batch_size" if mode == "train" else "eval_batch_size": size}, mode=mode,
                                 batch_size=size, warmup=warmup, steps=steps, config=eager))
        if trial.verdict is TrialVerdict.OK and trial.samples_per_s:
            points.append((size, trial.samples_per_s))
        if trial.verdict is TrialVerdict.OK and trial.peak_mem_bytes:
            memory.append((size, float(trial.peak_mem_bytes)))
        return trial.verdict in (TrialVerdict.OK, TrialVerdict.REJECTED)  # a NaN loss still fit in memory

    def predict(lo: int, hi: int) -> int | None:
        capacity = _capacity(ctx)
        guess = linear_limit(memory, capacity) if capacity else None
        if guess is not None:
            where = "inside" if lo < guess < hi else "outside"
            notes.append(f"{mode}: peak memory of the probes that fit puts the limit near {guess} ({where} the "
                         f"bracket {lo}..{hi}); narrowed around it")
        return guess

    def flat() -> bool:
        """Two doublings in a row gained less than FLAT_GAIN each: larger batches buy no speed."""
        if not stop_when_flat or len(points) < 3:
            return False
        (_, a), (_, b), (_, c) = points[-3:]
        return b < a * (1 + FLAT_GAIN) and c < b * (1 + FLAT_GAIN)

    found = grow_then_bisect(fits, start=start, cap=cap, margin=ctx.options.margin, predict=predict, enough=flat)
    if found.largest_fit is None and start > 1:
        # the starting batch itself ran out of memory: halve until one fits, then narrow upwards
        lo, hi = None, start
        size = start // 2
        while size >= 1 and lo is None:
            if fits(size):
                lo = size
            else:
                hi, size = size, size // 2
        if lo is not None:
            lo, hi = narrow(fits, lo, hi, resolution=0.01) if hi - lo > 1 else (lo, hi)
            found = BoundarySearch(largest_fit=lo, smallest_fail=hi, chosen=max(1, int(lo * (1 - ctx.options.margin))),
                                   probes=found.probes, capped=False)
            notes.append(f"the starting batch {start} ran out of memory; searched downwards")
    return found


def _fed_run(ctx: TuneContext, batch: int, fed: float | None) -> dict[str, Any]:
    """How a check run of ``batch`` goes through the loader: about 3 s of what the loader feeds, past
    the workers' start (as the confirmation runs it); nothing when the loader keeps up."""
    if not fed:
        return {}
    return {"mode": "loader", "warmup": ctx.options.warmup + 2, "steps": loader_steps(ctx, batch, fed)}


def tune_batch(ctx: TuneContext) -> KnobResult:
    """Find and agree the per-device train batch (and eval batch); update ``ctx``.

    The search starts at the configured batch and moves from there (up while it fits and the
    throughput still rises; down only if the configured batch does not fit). A budget spent in
    the middle raises :class:`BudgetSpent`: the session keeps the starting batch."""
    first = len(ctx.trials)
    cap, notes = caps(ctx)
    start = min(ctx.batch_size, cap)
    points: list[tuple[int, float]] = []
    knee_pick = ctx.options.batch_pick == "knee"
    found = _search(ctx, "train", start, cap, points, notes, stop_when_flat=knee_pick)
    if found.largest_fit is None:
        chosen, largest = 0, 0  # still joins the collectives below: the other ranks wait there
    else:
        chosen, largest = found.chosen, found.largest_fit
        if found.stopped:
            notes.append(f"growth stopped at {largest}: two doublings gained less than {FLAT_GAIN:.0%} each; the "
                         "memory limit was not searched (--pick-batch max searches it)")
        elif found.capped:
            notes.append(f"memory did not run out up to the cap ({cap}); no margin applied")
        else:
            notes.append(f"largest batch that fit: {found.largest_fit}; first that did not: {found.smallest_fail}; "
                         f"margin {ctx.options.margin:.0%} -> {found.chosen}")
    per_rank = ctx.gather(chosen)
    chosen = ctx.agree_min(chosen)
    if ctx.world_size > 1:
        notes.append(f"ranks found {per_rank}; all use the smallest, {chosen} (all-reduce MIN)")
    if chosen == 0:
        return KnobResult(knob="batch", trials=tuple(ctx.trials[first:]), notes=tuple(notes),
                          summary=f"not even a batch of 1 fits: shrink the model's memory (bf16, "
                                  "activation checkpointing, FSDP) before tuning the batch")
    flat = ctx.agree(knee([p for p in points if p[0] <= chosen], tolerance=KNEE_TOLERANCE))
    if flat is not None and points:
        best_size, best_rate = max(points, key=lambda p: p[1])
        notes.append(f"throughput flattens at batch {flat} (within {KNEE_TOLERANCE:.0%} of the best, "
                     f"{best_rate:,.0f} samples/s at batch {best_size}, 3-step memory probes); larger batches buy "
                     "memory use, not speed")
    candidate = flat if knee_pick and flat is not None and flat < chosen else chosen
    candidate = min(candidate, chosen)

    # The candidate against the starting batch at full length, interleaved and repeated (the real
    # configuration, compile included): a larger batch is written only when it is faster beyond
    # the noise. Its rate is the GPU's consumption rate the loader knob aims for. When the loader
    # cannot feed the GPU, both run as training runs them (real DataLoader): a gain with the data
    # on the device would not reach training (ResNet-50 on an H200, CPU augmentation: batch 1024
    # measured 1.33x batch 256 on the device, 0.81x through the loader, issue 17).
    base = min(start, chosen)
    sizes = [base] if candidate == base else [base, candidate]
    fed = input_bound(ctx)
    if fed and len(sizes) > 1:
        notes.append(f"the loader feeds {fed:,.0f} samples/s, the GPU takes {gpu_rate(ctx):,.0f}: the "
                     "candidate is checked as training runs it (real DataLoader)")
    rows = ctx.measure([ctx.spec("batch", f"batch={b} ({'starting' if b == start else 'candidate'})",
                                 {"batch_size": b}, batch_size=b, **_fed_run(ctx, b, fed)) for b in sizes])
    won, why = pick([measured(r) for r in rows], base=0, tolerance=ctx.options.tolerance)
    won = ctx.agree(won)
    if won is None:
        notes.append(f"no batch passed its check run ({rows[-1].verdict.value}: {rows[-1].reason}); lower it by hand "
                     "or rerun with --isolation process")
        won = 0
    picked, verify = sizes[won], rows[won]
    if len(sizes) > 1:
        notes.append(f"batch {candidate} vs the starting {base}: {why}")
    ctx.config = ctx.config.replace(batch_size=picked)
    if verify.verdict is TrialVerdict.OK and not fed:
        ctx.consumption_rate = verify.samples_per_s

    # The eval pass on its own: no gradients, so it usually fits a larger batch.
    eval_note = ""
    if ctx.target.eval_dataset is not None and not ctx.out_of_time():
        eval_cap = max(1, min(len(ctx.target.eval_dataset) // ctx.world_size, LAUNCH_DIM_CAP,
                              ctx.options.max_batch or LAUNCH_DIM_CAP))
        try:
            ev = _search(ctx, "eval", min(max(picked, chosen), eval_cap), eval_cap, [], notes)
            eval_chosen = ctx.agree_min(ev.chosen or 0)
            if eval_chosen:
                ctx.loader = ctx.loader.replace(eval_batch_size=eval_chosen)
                eval_note = f"; eval batch {eval_chosen}"
        except BudgetSpent:
            notes.append("time budget spent before the eval batch was probed; eval uses the train batch")
    how = ("the starting batch (nothing larger was faster beyond the noise)" if picked == base else
           "the throughput knee" if picked == flat and knee_pick else "the largest safe batch")
    limit = (f"largest tried {largest}, limit not searched" if found.stopped
             else f"largest safe {chosen} (largest that fit: {largest})")
    return KnobResult(knob="batch", trials=tuple(ctx.trials[first:]), winner=verify.setting,
                      params={"batch_size": picked, "max_batch_size": chosen,
                              **({"eval_batch_size": ctx.loader.eval_batch_size} if eval_note else {})},
                      summary=f"per-device batch {picked} ({how}); {limit}{eval_note}",
                      notes=tuple(notes))
