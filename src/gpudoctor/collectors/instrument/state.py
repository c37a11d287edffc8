"""The per-process state the probes share: one :data:`S`, a typed :class:`State`.

The probes see the user's objects (the optimizer that defines steps, the DDP or DataParallel
module, the DataLoaders) and hold every one of them **weakly**: probing a script must not keep
its optimizer, its model or its loaders alive after the script let go of them (a training loop
that rebuilds its optimizer, a test that checks memory is freed). What the probes learnt about
those objects outlives them as plain data: the rank config written after the first step
(:attr:`State.config`), which the config written at the end falls back on for an object that is
gone by then (``main()`` returned before ``atexit``).

Short-lived strong references stay, each cleared within the step that made it: the last loss
and gradient-norm tensors (until the boundary hands them to the lazy reader), the GradScaler
inside whose ``step()`` a fused optimizer steps.
"""

from __future__ import annotations

import os
import time
import weakref
from collections import deque
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudoctor.collectors.instrument.lazy import LazyValues

if TYPE_CHECKING:
    from gpudoctor.collectors.instrument.stepfile import StepFile
    from gpudoctor.collectors.profiler_window import Window
    from gpudoctor.core.timing import CudaEventTimer
    from gpudoctor.records.run import RankConfig

MAX_LAG_STEPS = 16  # a step whose lazy values are still missing after this many steps is written without them
# Another optimizer takes over the step count after stepping this many times in a row (and at
# least twice its longest earlier run) without the primary one stepping: a script that trains
# one optimizer after another (Forward-Forward's one optimizer per layer, a pre-training phase,
# then fine-tuning) would otherwise show no step for its whole second phase, read as a stall.
# A GAN's optimizers alternate every iteration, and a WGAN critic's 5 steps per generator step
# double to 10, both below it: they never hand over.
HANDOFF_STEPS = 20


def _deref(ref: weakref.ReferenceType[Any] | None) -> Any:
    return ref() if ref is not None else None


@dataclass(eq=False)
class LoaderCounts:
    """What the probes count for one DataLoader: epochs started (``iter()`` calls), batches."""

    epochs: int = 0
    batches: int = 0


@dataclass(eq=False)
class Seen:
    """What the patches saw of the training setup (read by :mod:`.rankconfig`); user objects
    only through weak references."""

    optimizer_ref: weakref.ReferenceType[Any] | None = None  # the primary optimizer
    ddp_ref: weakref.ReferenceType[Any] | None = None  # the last DistributedDataParallel built
    dp_ref: weakref.ReferenceType[Any] | None = None  # the last torch.nn.DataParallel built
    comm_hook: str = ""  # DDP communication hook's name
    autocast: set[str] = field(default_factory=set)  # dtypes autocast was entered with
    grad_scaler: bool = False
    compiled: bool = False  # torch.compile was called
    dist: tuple[int, int, str] | None = None  # (rank, world, backend) while a process group existed
    fetched: bool = False  # the first batch was fetched (step 0 starts there)
    prewarmed: bool = False  # the profiler was initialised inside the first optimizer step
    prewarm_handle: Any = None  # our optimizer pre-hook's RemovableHandle (ours, not the user's)
    first_step_done: bool = False
    window_note: str = ""  # a note for the profiler window's summary
    trace_dir: str = ""  # --trace-dir: where the window's trace goes, TensorBoard's layout
    # manual dist.all_reduce calls on a DDP model's gradients: (calls, bytes, first step)
    manual_grad_allreduce: tuple[int, int, int] | None = None

    @property
    def optimizer(self) -> Any:
        """The primary optimizer, or ``None`` when none stepped yet or it was garbage-collected."""
        return _deref(self.optimizer_ref)

    @property
    def ddp(self) -> Any:
        return _deref(self.ddp_ref)

    @property
    def dp(self) -> Any:
        return _deref(self.dp_ref)


@dataclass(eq=False)
class HostCounters:
    """What :mod:`.host_work` and :mod:`.host_sampler` gather in the current step: the named
    operations' time (``ops``: op -> [seconds, calls, bytes, gen2, site, longest call's seconds])
    and the sampled frames (``frames``: (function, file, line, op) -> [samples, seconds, libs,
    callers]); both handed to the step's record, and replaced, at its boundary."""

    ops: dict[str, list[Any]] = field(default_factory=dict)
    frames: dict[tuple[str, str, int, str], list[Any]] = field(default_factory=dict)
    op: str = ""  # the named operation the training thread is in now ("data": the DataLoader)
    gc_t0: float = 0.0  # when the running collection started (0.0: none running)
    gc_gen: int = 0
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=15))  # recent steps' seconds
    thread: int = 0  # the training thread's ident (the one that ends the steps)
    sampler_pid: int = 0  # the process the sampler thread runs in
    wakes: int = 0  # times the sampler thread woke (its whole cost in normal steps)


@dataclass(eq=False)
class State:
    """Mutable per-process probe state (one instance, :data:`S`)."""

    installed: bool = False
    quiet: bool = False  # our own tensor calls must not count as the user's
    owner_pid: int = field(default_factory=os.getpid)
    run_dir: Path | None = None
    rank: int = 0
    steps_limit: int | None = None
    window: tuple[int, int] | None = None
    keep_trace: bool = False
    step: int = 0  # optimizer steps completed
    t_origin: float = field(default_factory=time.perf_counter)
    t_last: float = 0.0  # set to t_origin in __post_init__
    primary: weakref.ReferenceType[Any] | None = None  # the optimizer that defines steps
    others_run: int = 0  # steps of other optimizers since the primary one last stepped
    others_longest: int = 0  # the longest such run that the primary one ended
    hook_fired: bool = False
    last_scaled: tuple[int, Any] | None = None  # (id(scaled loss), unscaled loss)
    last_loss: Any = None  # this step's loss tensor, until the boundary
    last_grad_norm: Any = None  # clip_grad_norm_'s returned tensor, this step
    scaler_seen: bool = False
    scaler_fused: Any = None  # the GradScaler inside whose step() a fused optimizer steps
    pending: dict[int, dict[str, Any]] = field(default_factory=dict)
    waiting: dict[int, set[str]] = field(default_factory=dict)
    written: set[int] = field(default_factory=set)  # pending steps already on disk as a provisional line
    changed: set[int] = field(default_factory=set)  # of those, steps that got a late value since
    writer: StepFile | None = None
    timer: CudaEventTimer | None = None
    span_start: Any = None  # the CUDA event that opened this step's GPU span
    lazy: LazyValues = field(default_factory=LazyValues)
    profiler: Window | None = None
    loaders: weakref.WeakSet[Any] = field(default_factory=weakref.WeakSet)
    loader_counts: weakref.WeakKeyDictionary[Any, LoaderCounts] = field(default_factory=weakref.WeakKeyDictionary)
    seen: Seen = field(default_factory=Seen)
    config: RankConfig | None = None  # the last rank config written (plain data)
    finished: bool = False
    compiled_frames: int = 0  # TorchDynamo's compiled-frame counter at the last boundary
    # per-step counters (reset_step)
    data_wait_s: float = 0.0
    h2d_s: float = 0.0
    h2d_bytes: int = 0
    h2d_pageable: int = 0
    h2d_wide_float: int = 0  # bytes of float32/float64 sources
    h2d_copies: int = 0
    h2d_blocking: int = 0
    syncs: int = 0
    sync_s: float = 0.0
    samples: int | None = None
    tokens: int | None = None
    backwards: int = 0
    empty_cache: int = 0
    host: HostCounters = field(default_factory=HostCounters)

    def __post_init__(self) -> None:
        self.t_last = self.t_origin

    def adopt(self) -> None:
        """In a forked training rank: this process's own state, keeping the installed settings
        (the patches and hooks came along with the fork)."""
        fresh = State(installed=self.installed, run_dir=self.run_dir, rank=self.rank,
                      steps_limit=self.steps_limit, window=self.window, keep_trace=self.keep_trace)
        for f in fields(self):
            setattr(self, f.name, getattr(fresh, f.name))

    def reset_step(self) -> None:
        self.data_wait_s = 0.0
        self.h2d_s = 0.0
        self.h2d_bytes = 0
        self.h2d_pageable = 0
        self.h2d_wide_float = 0
        self.h2d_copies = 0
        self.h2d_blocking = 0
        self.syncs = 0
        self.sync_s = 0.0
        self.samples = None
        self.tokens = None
        self.backwards = 0
        self.empty_cache = 0

    def set_primary(self, optimizer: Any) -> bool:
        """Whether ``optimizer`` defines the steps: the first one seen stepping, a new one once
        that one was garbage-collected (a script that rebuilds its optimizer), or one that
        stepped :data:`HANDOFF_STEPS` times in a row while the primary one did not."""
        primary = _deref(self.primary)
        if primary is optimizer:
            self.others_longest = max(self.others_longest, self.others_run)
            self.others_run = 0
            return True
        if primary is not None:
            self.others_run += 1
            if self.others_run < max(HANDOFF_STEPS, 2 * self.others_longest):
                return False
        self.primary = weakref.ref(optimizer)
        self.seen.optimizer_ref = self.primary
        self.others_run = self.others_longest = 0
        return True

    def loader_counts_of(self, loader: Any) -> LoaderCounts:
        """The counters of ``loader`` (created at its first ``iter()``)."""
        counts = self.loader_counts.get(loader)
        if counts is None:
            counts = self.loader_counts[loader] = LoaderCounts()
        return counts


S = State()


def is_owner() -> bool:
    """True in the training process itself (not a forked DataLoader worker)."""
    return os.getpid() == S.owner_pid


__all__ = ["MAX_LAG_STEPS", "HostCounters", "LoaderCounts", "S", "Seen", "State", "is_owner"]
