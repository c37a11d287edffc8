"""Input pipeline: is the step waiting for the DataLoader?"""

from __future__ import annotations

from gpudoctor.analysis.facts import RankFacts, RunFacts, main_loader
from gpudoctor.analysis.knob_map import PREFETCH_FACTOR, WORKERS_FIRST_STEP, loader_plan
from gpudoctor.analysis.prescription import ms, pct, performance_finding, worst_rank
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.analysis.transfer_rules import per_sample_copies
from gpudoctor.records.finding import Finding
from gpudoctor.records.run import LoaderConfig, RankConfig

CODE_DATALOADER = "GD-RUN-DATALOADER"


def describe_loader(loader: LoaderConfig) -> str:
    return (f"DataLoader: num_workers={loader.num_workers}, pin_memory={loader.pin_memory}, "
            f"persistent_workers={loader.persistent_workers}, "
            f"prefetch_factor={loader.prefetch_factor}, batch_size={loader.batch_size}")


def _loader_fix(loader: LoaderConfig | None, config: RankConfig | None, on_gpu: bool) -> str:
    """The fix as code. Its values come from :func:`~gpudoctor.analysis.knob_map.loader_plan`,
    the same plan ``--try``/``doctor`` inject (``LoaderPlan.knobs``): what is printed is what is tried."""
    plan = loader_plan(loader, config, on_gpu)
    batch = loader.batch_size if loader and loader.batch_size else "B"
    ranks = plan.local_world_size or 1
    cores = (f"{plan.cores} cores per rank ({plan.usable_cpus} CPUs / {ranks} "
             f"rank{'s' if ranks > 1 else ''} on this node)") if plan.cores is not None else ""
    lines: list[str] = []
    if plan.workers is None and plan.cores is not None:
        # the cores are used already: more processes will not help; make each sample cheaper
        lines += [
            f"# {plan.current_workers} workers already use the {cores}; make each batch cheaper:",
            "#  - augment on the GPU, per batch, after the copy (not per sample on the CPU)",
            "#  - keep decoded data in memory or in a faster format (no per-sample decode)",
        ]
    lines.append(f"loader = DataLoader(dataset, batch_size={batch}, shuffle=True,")
    if plan.workers is not None:
        lines.append(f"{'':20}num_workers={plan.workers},{'':<{14 - len(str(plan.workers))}}"
                     f"# was {plan.current_workers}: load in parallel processes")
    elif plan.cores is None:
        lines.append(f"{'':20}num_workers=N,             # was {plan.current_workers}; N = CPU cores per rank - 1")
    else:
        lines.append(f"{'':20}num_workers={plan.current_workers},")
    if on_gpu:
        lines.append(f"{'':20}pin_memory=True,           # page-locked: async, faster copies")
    lines += [  # every plan has workers (a loader with none gets some)
        f"{'':20}persistent_workers=True,   # keep workers alive between epochs",
        f"{'':20}prefetch_factor={PREFETCH_FACTOR})         # batches each worker prepares ahead",
    ]
    if on_gpu:
        lines.append("x = x.to(device, non_blocking=True)   # overlaps the copy with compute")
    if plan.workers is not None:
        lines.append(f"# num_workers={plan.workers}: {cores} - 1, "
                     f"at most {max(WORKERS_FIRST_STEP, 2 * plan.current_workers)}")
    elif plan.cores is None:
        lines.append("# choose num_workers <= CPU cores per rank - 1 (len(os.sched_getaffinity(0)) // ranks per node)")
    return "\n".join(lines)


def exposed_wait_share(rf: RankFacts) -> float:
    """The share of the median step the GPU idled while the host waited for the next batch: a
    wait that queued GPU work hides costs nothing (:mod:`gpudoctor.analysis.breakdown`)."""
    return rf.breakdown.share("data")


def check_data_loader(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """Data-loader bound: the step waits for the next batch for a large share of its time.

    Expected gain = the data-wait share: with enough workers prefetching, the next batch is ready
    when the step ends, so the wait goes to about zero while the rest of the step is unchanged
    (an upper bound: it holds while the workers together produce batches faster than the GPU
    consumes them).
    """
    return worst_rank(facts.ranks, lambda rf: _data_loader(facts, rf, th), lambda rf: rf.rank)


def _data_loader(facts: RunFacts, rf: RankFacts, th: Thresholds) -> list[Finding]:
    share = exposed_wait_share(rf)
    if share < th.data_wait_min_share:
        return []
    if facts.on_gpu and per_sample_copies(rf, th):
        return []  # .cuda() inside __getitem__: GD-RUN-H2D-PER-SAMPLE owns the fix (workers can't use CUDA)
    loader = main_loader(rf.config)
    s = rf.stats
    evidence = [f"waiting for the next batch: {ms(s.mean_data_wait_ms)} of a "
                f"{ms(s.mean_step_ms)} mean step (median {ms(s.data_wait_ms)} of "
                f"{ms(s.step_ms)}), rank {rf.rank}"]
    if rf.breakdown.gpu_timeline and share < s.mean_data_wait_ms / s.mean_step_ms - th.data_wait_note_min_share:
        evidence.append(f"of it, {pct(share)} with the GPU idle (the rest overlaps queued GPU work)")
    tail = s.tail
    if tail is not None and tail.stalls and tail.extra_data_wait_ms > 0:
        every = f"every ~{tail.period:.0f} steps" if tail.period and tail.regular else "in bursts"
        evidence.append(f"the wait comes {every}: {len(tail.slow_steps)} of {s.n_used} steps wait "
                        f"{ms(tail.extra_data_wait_ms)} more than the median step")
    if loader is not None:
        evidence.append(describe_loader(loader))
    busy = rf.busy_frac
    if facts.on_gpu and busy is not None:
        evidence.append(f"GPU busy {pct(busy)} of the step")
    elif not facts.on_gpu:
        evidence.append("CPU-only run: the loader competes with the model for the same cores")
    return performance_finding(
        code=CODE_DATALOADER,
        gain=share,
        thresholds=th,
        title=f"Data-loader bound: {pct(share)} of each step waits for the next batch",
        evidence=evidence,
        fix=_loader_fix(loader, rf.config, facts.on_gpu),
    )


__all__ = ["CODE_DATALOADER", "check_data_loader", "describe_loader", "main_loader"]
