"""The per-process state the probes share: one :data:`S`."""

from __future__ import annotations

import os
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudoctor.collectors.instrument.lazy import LazyValues

if TYPE_CHECKING:
    from gpudoctor.collectors.instrument.stepfile import StepFile

MAX_LAG_STEPS = 16  # a step whose lazy values are still missing after this many steps is written without them


class State:
    """Mutable per-process probe state (one instance, :data:`S`)."""

    def __init__(self) -> None:
        self.installed = False
        self.quiet = False  # our own tensor calls must not count as the user's
        self.owner_pid = os.getpid()
        self.run_dir: Path | None = None
        self.rank = 0
        self.steps_limit: int | None = None
        self.window: tuple[int, int] | None = None
        self.keep_trace = False
        self.step = 0  # optimizer steps completed
        self.t_origin = time.perf_counter()
        self.t_last = self.t_origin
        self.primary: Any = None  # weakref to the optimizer that defines steps
        self.hook_fired = False
        self.last_scaled: tuple[int, Any] | None = None  # (id(scaled loss), unscaled loss)
        self.last_loss: Any = None
        self.last_grad_norm: Any = None  # clip_grad_norm_'s returned tensor, this step
        self.scaler_seen = False
        self.scaler_fused: Any = None  # the GradScaler inside whose step() a fused optimizer steps
        self.reset_step()
        self.pending: dict[int, dict[str, Any]] = {}
        self.waiting: dict[int, set[str]] = {}
        self.written: set[int] = set()  # pending steps already on disk as a provisional line
        self.changed: set[int] = set()  # of those, steps that got a late value since
        self.writer: StepFile | None = None
        self.timer: Any = None
        self.span_start: Any = None
        self.lazy = LazyValues()
        self.profiler: Any = None
        self.loaders: Any = weakref.WeakSet()
        self.loader_configs: dict[int, Any] = {}
        self.info: dict[str, Any] = {}  # config facts seen by the patches (autocast, ddp, ...)
        self.finished = False
        self.compiled_frames = 0  # TorchDynamo's compiled-frame counter at the last boundary

    def adopt(self) -> None:
        """In a forked training rank: this process's own state, keeping the installed settings
        (the patches and hooks came along with the fork)."""
        keep = {k: getattr(self, k) for k in ("installed", "run_dir", "rank", "steps_limit", "window", "keep_trace")}
        self.__init__()  # type: ignore[misc]
        for name, value in keep.items():
            setattr(self, name, value)

    def reset_step(self) -> None:
        self.data_wait_s = 0.0
        self.h2d_s = 0.0
        self.h2d_bytes = 0
        self.h2d_pageable = 0
        self.h2d_copies = 0
        self.h2d_blocking = 0
        self.syncs = 0
        self.sync_s = 0.0
        self.samples: int | None = None
        self.tokens: int | None = None
        self.backwards = 0
        self.empty_cache = 0


S = State()


def is_owner() -> bool:
    """True in the training process itself (not a forked DataLoader worker)."""
    return os.getpid() == S.owner_pid
