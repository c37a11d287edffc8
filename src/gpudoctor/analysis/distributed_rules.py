"""Several ranks: samplers and their epochs, DataParallel, device placement, exposed communication,
stragglers."""

from __future__ import annotations

from gpudoctor.analysis.facts import RunFacts, main_loader
from gpudoctor.analysis.prescription import ms, pct, performance_finding
from gpudoctor.analysis.steps import median
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Finding, Severity
from gpudoctor.records.run import RankConfig

CODE_SET_EPOCH = "GD-RUN-NO-SET-EPOCH"
CODE_SAME_GPU = "GD-RUN-SAME-GPU"
CODE_COMM = "GD-RUN-DDP-COMM-EXPOSED"
CODE_STRAGGLER = "GD-RUN-STRAGGLER"
CODE_NO_DIST_SAMPLER = "GD-RUN-NO-DIST-SAMPLER"
CODE_DATA_PARALLEL = "GD-RUN-DATA-PARALLEL"

SHARDED_KINDS = ("ddp", "fsdp", "fsdp2")  # one process per GPU, each meant to see 1/N of the data
# the sampler PyTorch's DataLoader gives an IterableDataset: the dataset shards itself (or not:
# that is the dataset's business, out of the sampler's reach)
ITERABLE_SAMPLER = "_InfiniteConstantSampler"


def _shards(sampler: str, set_epoch_called: bool | None) -> bool:
    """The sampler splits the data between ranks: a DistributedSampler, or any sampler the probes
    saw with ``num_replicas`` and ``set_epoch`` (they record ``set_epoch_called`` for those)."""
    return sampler == "DistributedSampler" or set_epoch_called is not None


def check_dist_sampler(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """DDP/FSDP with world size > 1 whose training loader has no DistributedSampler: every rank
    iterates the whole dataset ("fine on 1 GPU, OOM on 2", seed 001 §5): N ranks do N times the
    work for one epoch of learning, and a dataset each rank loads into memory is loaded N times.

    Correctness, not speed: reported on every rank it affects (the first one's loader in the
    evidence). An IterableDataset is left out: it has no sampler and shards itself.
    """
    hits = []
    for rank, cfg in sorted(facts.configs.items()):
        if cfg.ddp is None or cfg.ddp.kind not in SHARDED_KINDS or cfg.world_size < 2:
            continue
        lo = main_loader(cfg)
        if lo is None or lo.sampler == ITERABLE_SAMPLER or _shards(lo.sampler, lo.set_epoch_called):
            continue
        hits.append((rank, cfg, lo))
    if not hits:
        return []
    rank, cfg, lo = hits[0]
    size = f" of {lo.dataset_len} samples" if lo.dataset_len else ""
    evidence = [
        f"rank {rank} ({cfg.ddp.kind}, world size {cfg.world_size}): its training loader iterates "
        f"{lo.dataset}{size} with {lo.sampler or 'no sampler'}, not a DistributedSampler",
        f"ranks affected: {', '.join(str(r) for r, _, _ in hits)}; each sees the whole dataset, so "
        f"one epoch is {cfg.world_size}x the work (and ranks seeded alike train on the same batches)",
    ]
    return [Finding(
        code=CODE_NO_DIST_SAMPLER, severity=Severity.WARN,
        title=f"{cfg.ddp.kind.upper()} without DistributedSampler: every rank loads the whole dataset",
        evidence=tuple(evidence),
        fix=(
            "from torch.utils.data.distributed import DistributedSampler\n"
            "sampler = DistributedSampler(dataset, shuffle=True)   # 1/world_size of it per rank\n"
            "loader = DataLoader(dataset, batch_size=B, sampler=sampler)  # no shuffle=True here\n"
            "for epoch in range(epochs):\n"
            "    sampler.set_epoch(epoch)   # a new permutation each epoch, the same on every rank\n"
            "    for x, y in loader:\n"
            "        ..."
        ),
        expected_gain=None,
    )]


def check_data_parallel(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """``torch.nn.DataParallel``: one process drives every GPU (seed 002 §5.1, 000 §5.3).

    Each step it scatters the batch from GPU 0, replicates the model to every GPU, gathers the
    outputs back onto GPU 0 and runs all of that from one Python thread under the GIL: GPU 0
    carries more memory than the others and the GPUs wait for the host. DDP (one process per
    GPU) is PyTorch's recommendation even on one machine. No expected gain: it depends on the
    model, and ``gpudoctor run`` measures the DDP version once it exists. INFO where it drove
    one GPU or none (it then only wraps the module: pytorch/examples' imagenet script wraps its
    model so on a one-GPU machine, where a WARN would have out-ranked its measured loader fix).
    """
    for rank, cfg in sorted(facts.configs.items()):
        if cfg.ddp is None or cfg.ddp.kind != "dp":
            continue
        n = len(cfg.ddp.device_ids)
        gpus = f"{n} GPU(s) (device_ids {list(cfg.ddp.device_ids)})" if n else "every visible GPU"
        evidence = [f"rank {rank}: torch.nn.DataParallel over {gpus}, in one process"]
        on_gpu = cfg.device.startswith("cuda")
        several = n >= 2 or (n == 0 and len(facts.gpus) >= 2)
        if on_gpu and not several:
            return _one_gpu_data_parallel(facts, rank, th, evidence)
        if not on_gpu:  # a note: here it only wrapped the module, on a GPU machine it will not
            evidence.append("this run had no CUDA device: DataParallel only wrapped the module")
        return [Finding(
            code=CODE_DATA_PARALLEL, severity=Severity.WARN if on_gpu else Severity.INFO,
            title="DataParallel: one process drives all the GPUs; DDP is faster",
            evidence=tuple(evidence),
            fix=(
                "# one process per GPU: torchrun --nproc_per_node <GPUs> train.py\n"
                "local_rank = int(os.environ[\"LOCAL_RANK\"])\n"
                "torch.cuda.set_device(local_rank)\n"
                "dist.init_process_group(\"nccl\")\n"
                "model = DDP(model.to(local_rank), device_ids=[local_rank])   # not nn.DataParallel\n"
                "loader = DataLoader(ds, batch_size=B // world_size, sampler=DistributedSampler(ds))"
            ),
            expected_gain=None,
        )]
    return []


# CPU ops of torch.nn.DataParallel's own work in a step (its forward, scatter and gather)
_DP_OPS = ("DataParallel", "Scatter", "Gather", "Broadcast")
_ONE_GPU_FIX = (
    "# over one GPU DataParallel only scatters and gathers: use the module itself\n"
    "model = net.to(device)                 # not nn.DataParallel(net)\n"
    "# checkpoints then have no \"module.\" prefix; to load the ones saved before:\n"
    "state = {k.removeprefix(\"module.\"): v for k, v in torch.load(path, weights_only=True).items()}"
)


def _one_gpu_data_parallel(facts: RunFacts, rank: int, th: Thresholds, evidence: list[str]) -> list[Finding]:
    """DataParallel over the one GPU there is: its host cost per step, measured in the window
    (self time of its forward, scatter and gather ops), is what the plain module saves when the
    GPU waits for the host; INFO with no gain where the window does not show it."""
    rf = next((r for r in facts.ranks if r.rank == rank), None)
    w = rf.window if rf is not None else None
    cost = 0.0
    if w is not None and rf.window_steps:
        cost = sum(o.total_us for o in w.top_ops if any(k in o.name for k in _DP_OPS)) / 1000.0 / rf.window_steps
    step = rf.breakdown.step_ms if rf is not None else 0.0
    idle = 1.0 - rf.busy_frac if rf is not None and rf.busy_frac is not None else None
    evidence.append("over one GPU it only scatters the batch and gathers the outputs")
    if cost > 0 and step > 0 and idle is not None:
        evidence.append(f"its forward, scatter and gather took {ms(cost)} of host time per step "
                        f"(profiler window, self time) against a {ms(step)} mean step with the GPU "
                        f"idle {pct(idle)}")
        found = performance_finding(
            code=CODE_DATA_PARALLEL, gain=min(cost / step, idle), thresholds=th,
            title=f"DataParallel over one GPU costs {ms(cost)} of host time a step for nothing",
            evidence=evidence, fix=_ONE_GPU_FIX)
        if found:
            return found
    return [Finding(code=CODE_DATA_PARALLEL, severity=Severity.INFO,
                    title="DataParallel over one GPU: it only wraps the module",
                    evidence=tuple(evidence), fix=_ONE_GPU_FIX, expected_gain=None)]


def check_set_epoch(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """A DistributedSampler iterated without ``set_epoch``: every epoch repeats the same order."""
    for rank, cfg in sorted(facts.configs.items()):
        for loader in cfg.loaders:
            # set_epoch_called is None for a sampler without set_epoch (nothing to forget)
            if loader.set_epoch_called is not False:
                continue
            if loader.epochs_started < 1:
                continue
            return [Finding(
                code=CODE_SET_EPOCH, severity=Severity.WARN,
                title="DistributedSampler without set_epoch(): every epoch uses the same shuffle",
                evidence=(
                    f"rank {rank}: {loader.sampler or 'sampler'} over {loader.dataset}"
                    + (f" ({loader.dataset_len} samples)" if loader.dataset_len else "")
                    + f", {loader.epochs_started} epoch(s) started, set_epoch never called",
                ),
                fix=(
                    "for epoch in range(epochs):\n"
                    "    sampler.set_epoch(epoch)   # new permutation each epoch, same on every rank\n"
                    "    for x, y in loader:\n"
                    "        ..."
                ),
                expected_gain=None,
            )]
    return []


def _physical_gpu(cfg: RankConfig) -> str | None:
    """Which physical GPU a rank used: its UUID, else its index mapped through its own
    CUDA_VISIBLE_DEVICES (each rank may see a different GPU as "cuda:0")."""
    if cfg.cuda_device_uuid:
        return cfg.cuda_device_uuid
    if cfg.cuda_device_index is None:
        return None
    if cfg.cuda_visible_devices:
        visible = [v.strip() for v in cfg.cuda_visible_devices.split(",") if v.strip()]
        if cfg.cuda_device_index < len(visible):
            return visible[cfg.cuda_device_index]
    return str(cfg.cuda_device_index)


def _shared_gpus(facts: RunFacts) -> dict[str, list[int]]:
    """GPU label -> ranks, for GPUs used by two or more ranks."""
    configs = {r: c for r, c in sorted(facts.configs.items()) if c.device.startswith("cuda")}
    by_gpu: dict[str, list[int]] = {}
    if configs and all(c.cuda_device_uuid for c in configs.values()):
        # the UUID is exact: trust it over everything else
        for rank, cfg in configs.items():
            by_gpu.setdefault(f"{cfg.cuda_device_index} ({cfg.cuda_device_uuid})", []).append(rank)
    else:
        # NVML's process lists name the physical GPU; in a container they may hold host PIDs that
        # match no rank, and then the ranks' own (visible-device-mapped) indices decide
        pids = {cfg.pid: rank for rank, cfg in configs.items()}
        for gpu in facts.gpus:
            ranks = sorted(pids[p] for p in gpu.pids if p in pids)
            if ranks:
                by_gpu[str(gpu.index)] = ranks
        if not by_gpu:
            for rank, cfg in configs.items():
                label = _physical_gpu(cfg)
                if label is not None:
                    by_gpu.setdefault(label, []).append(rank)
    return {label: ranks for label, ranks in by_gpu.items() if len(ranks) >= 2}


def check_same_gpu(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """Several ranks on one GPU, usually because ``torch.cuda.set_device(local_rank)`` is missing."""
    if not facts.on_gpu or facts.world_size < 2:
        return []
    shared = _shared_gpus(facts)
    if not shared:
        return []
    label, ranks = next(iter(sorted(shared.items())))
    evidence = [f"ranks {', '.join(map(str, ranks))} all ran on GPU {label}"]
    if facts.gpus:
        evidence.append(f"GPUs sampled on this machine: {len(facts.gpus)}")
    return [Finding(
        code=CODE_SAME_GPU, severity=Severity.ERROR,
        title=f"{len(ranks)} ranks share GPU {label.split(' ')[0]}: each gets a fraction of one GPU",
        evidence=tuple(evidence),
        fix=(
            "local_rank = int(os.environ[\"LOCAL_RANK\"])\n"
            "torch.cuda.set_device(local_rank)                 # first, before anything touches CUDA\n"
            "dist.init_process_group(\"nccl\", device_id=torch.device(\"cuda\", local_rank))\n"
            "model = DDP(model.to(local_rank), device_ids=[local_rank])\n"
            "# and start one process per GPU: torchrun --nproc_per_node <number of GPUs>"
        ),
        expected_gain=None,
    )]


def check_comm_exposed(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """DDP gradient communication not hidden behind the backward pass.

    Uses the *least* exposed rank: on the others, NCCL time also contains waiting for a slow rank,
    which the straggler rule reports. Expected gain = that exposed share of the step (with the
    all-reduce fully overlapped by backward compute it leaves the critical path).
    """
    ranks = [rf for rf in facts.ranks if rf.window is not None and rf.window.nccl_ms]
    if facts.world_size < 2 or not ranks:
        return []
    rf = min(ranks, key=lambda r: r.stats.share(r.exposed_comm_ms))
    share = rf.stats.share(rf.exposed_comm_ms)
    if share < th.comm_min_exposed_share:
        return []
    ddp = rf.config.ddp if rf.config is not None else None
    evidence = [
        f"NCCL {ms(rf.per_step(rf.window.nccl_ms))} per step, "
        f"{pct(rf.window.nccl_overlap_frac)} overlapped with compute (least exposed: rank {rf.rank})",
        f"exposed communication {ms(rf.exposed_comm_ms)} of a {ms(rf.stats.step_ms)} step",
    ]
    if ddp is not None:
        evidence.append(f"{ddp.kind}: bucket_cap_mb={ddp.bucket_cap_mb}, "
                        f"find_unused_parameters={ddp.find_unused_parameters}, "
                        f"gradient_as_bucket_view={ddp.gradient_as_bucket_view}, "
                        f"static_graph={ddp.static_graph}")
    return performance_finding(
        code=CODE_COMM, gain=share, thresholds=th,
        title=f"DDP communication not overlapped: {pct(share)} of each step waits for all-reduce",
        evidence=evidence,
        fix=(
            "model = DDP(model, device_ids=[local_rank],\n"
            "            bucket_cap_mb=50,                 # fewer, larger all-reduces start earlier\n"
            "            gradient_as_bucket_view=True,     # no gradient copy into buckets\n"
            "            static_graph=True,                # if the graph is the same every step\n"
            "            find_unused_parameters=False)     # it forces an extra pass\n"
            "# with gradient accumulation: `with model.no_sync():` on all but the last micro-step"
        ),
    )


def check_straggler(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """One rank is slower and the others wait for it at every collective.

    Two signals: ranks that do not wait for each other show it in their mean step time; ranks
    that do (DDP) all have the same step time, but the fast ones spend the difference inside the
    collectives (the profiler window's exposed NCCL time per rank, plus its gloo collective time
    on a gloo run, where there are no NCCL kernels). Expected gain = that difference as a
    share of the step: it is what every other rank waits.

    A real straggler (the ``straggler`` workload: one rank sleeps every step) costs the same
    milliseconds every step, for the whole run. So the rule needs ``straggler_min_steps`` steady
    steps on every rank (fewer, and where the count starts and ends alone can make one rank's
    mean look 10% slower in DDP lockstep) and a difference of at least ``straggler_min_ms`` per
    step (less is one scheduler time slice on a busy host) as well as ``straggler_min_skew``.
    A window wait per step longer than the median step itself (un-profiled, or of the waiting
    ranks' window steps, whichever is longer) cannot recur every step: it is left out (seen on
    2 x H200: 5.5 ms "per step" against 2.3 ms steps and a 3.2 ms median window step, from
    profiler start skew).
    """
    if facts.world_size < 2 or len(facts.ranks) < 2:
        return []
    if min(rf.stats.n_used for rf in facts.ranks) < th.straggler_min_steps:
        return []  # too short to tell a per-step cost from start-up and scheduling skew
    step = median([rf.stats.step_ms for rf in facts.ranks]) or 0.0
    if step <= 0:
        return []
    candidates = []  # (lost ms per step, straggler rank, evidence)
    # mean, not median: ranks that meet in a collective every step have the same mean step
    # time, and only ranks that really drift apart differ
    times = {rf.rank: rf.stats.mean_step_ms for rf in facts.ranks}
    slow = max(times, key=times.get)
    candidates.append((times[slow] - min(times.values()), slow,
                       "mean step time per rank: " + ", ".join(
                           f"rank {r}: {ms(t)}" for r, t in times.items())))
    windows = [rf.window for rf in facts.ranks if rf.window is not None]
    waits = {rf.rank: rf.comm_wait_ms for rf in facts.ranks if rf.window is not None}
    if len(waits) >= 2:
        slow = min(waits, key=waits.get)
        others = median([w for r, w in waits.items() if r != slow]) or 0.0
        kinds = [k for k, on in (("exposed NCCL", any(w.nccl_ms for w in windows)),
                                 ("gloo", any(w.gloo_ms for w in windows))) if on]
        # A wait every step is part of every step: more wait per window step than a whole
        # step is a one-off inside the window (one rank starting or stopping its profiler
        # later than the others), not a rank that is slow every step. "A whole step" is the
        # longer of the un-profiled median and the median of the window's own steps: the
        # profiler slows the window's steps (on 2 busy CPU cores, gloo, 20 ms straggler sleep:
        # 26 ms steps, up to 32 ms in the window), and a wait spread over every window step
        # grows with them, while a one-off sits in one window step and leaves the median alone.
        in_window = median([rf.window_step_ms for rf in facts.ranks
                            if rf.window_step_ms is not None and rf.rank != slow])
        if others - waits[slow] <= max(step, in_window or 0.0):
            candidates.append((others - waits[slow], slow,
                               f"{' + '.join(kinds) or 'exposed NCCL'} wait per step: " + ", ".join(
                                   f"rank {r}: {ms(w)}" for r, w in waits.items())))
    lost_ms, slow, evidence = max(candidates, key=lambda c: c[0])
    skew = lost_ms / step
    if skew < th.straggler_min_skew or lost_ms < th.straggler_min_ms:
        return []
    return performance_finding(
        code=CODE_STRAGGLER, gain=skew, thresholds=th,
        title=f"Straggler: rank {slow} is slower; the other ranks wait {pct(skew)} of each step",
        evidence=[evidence, f"median step {ms(step)} over {len(facts.ranks)} ranks, "
                            f"{min(rf.stats.n_used for rf in facts.ranks)} steady steps each"],
        fix=(
            f"# find what rank {slow} does that the others don't, per step:\n"
            "#  - logging, evaluation or checkpointing on one rank inside the loop\n"
            "#    (do it every N steps, or asynchronously)\n"
            "#  - uneven data (drop_last=True; bucket variable-length samples)\n"
            "#  - a slower or throttled GPU, or a busier host: `gpudoctor monitor`\n"
            "if step % log_every == 0 and dist.get_rank() == 0:\n"
            "    log(metrics)"
        ),
    )


__all__ = ["CODE_COMM", "CODE_DATA_PARALLEL", "CODE_NO_DIST_SAMPLER", "CODE_SAME_GPU", "CODE_SET_EPOCH",
           "CODE_STRAGGLER", "check_comm_exposed", "check_data_parallel", "check_dist_sampler",
           "check_same_gpu", "check_set_epoch", "check_straggler"]
