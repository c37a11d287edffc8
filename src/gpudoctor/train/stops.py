"""Why a ``fit`` stops early: a loss that stays non-finite, or SIGTERM.

A run that stops must say so: a ``robust.nonfinite="skip"`` run whose every step is skipped
raises :class:`NonFiniteLossError` instead of returning as if it had trained, and a run asked to
stop by SIGTERM (a spot instance reclaimed, Slurm's signal before its kill) saves at the next
step boundary and says where, so that running the same command again resumes.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from gpudoctor.train.checkpoint import checkpoint_path


class NonFiniteLossError(FloatingPointError):
    """The loss became NaN or inf and ``robust.nonfinite`` says to stop."""


TERM_REASON = "SIGTERM received: saved and stopped at a step boundary"


def nonfinite_error(step: int, rank: int) -> NonFiniteLossError:
    """The error for ``robust.nonfinite="stop"``: the first step whose loss was NaN/inf."""
    return NonFiniteLossError(
        f"the loss was NaN/inf at step {step} (rank {rank}); training stopped before "
        "saving a checkpoint. Lower the learning rate, add precision.grad_clip_norm, use bf16 "
        "instead of fp16, or set robust.nonfinite='skip' to skip such steps")


def skip_streak_error(streak: int, step: int, rank: int) -> NonFiniteLossError:
    """The error for ``streak`` consecutive skipped steps ending at ``step`` (0-based)."""
    first = step - streak + 1
    return NonFiniteLossError(
        f"{streak} consecutive steps were skipped because the loss or gradients were NaN/inf, from "
        f"step {first} to step {step} (rank {rank}; robust.max_skips={streak}); nothing was trained "
        "in that time, so training stopped. Check the inputs for NaN/inf, lower the learning rate, "
        "add precision.grad_clip_norm, and under fp16 look for overflow (use bf16, or a loss that "
        "is computed in fp32)")


class TermSignal:
    """While in use, SIGTERM sets :attr:`received` instead of killing the process.

    Installed only from the main thread (Python delivers signals there; elsewhere it is a no-op)
    and only over a handler that is Python's or the default one; the previous handler is put back
    on exit. The loop polls :meth:`agreed` at step boundaries and stops cleanly.
    """

    def __init__(self) -> None:
        self.received = False
        self._previous: Any = None
        self._installed = False
        self._key: str | None = None  # this fit's entry in the process group's store
        self._stop_at: int | None = None

    def __enter__(self) -> TermSignal:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.getsignal(signal.SIGTERM)
            if self._previous is not None:  # None: set from C, cannot be put back from Python
                signal.signal(signal.SIGTERM, self._handle)
                self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = True

    def agreed(self, step: int, parallel: Any, every: int) -> bool:
        """Whether to stop after ``step``. One process: as soon as SIGTERM arrived.

        Under torchrun the ranks must stop at the same step, or the ones still training wait in
        a collective forever. They agree through the process group's key-value store (host
        only: no collective, no GPU sync in the step): every ``every`` steps a rank that got the
        signal proposes to stop ``2 * every`` steps later, the first proposal wins, and every rank
        reads it at its next boundary. Ranks more than ``every`` steps apart would miss it; DDP's
        gradient all-reduce keeps them within a step or two.
        """
        if parallel.world_size == 1:
            return self.received
        if step % every:
            return False
        store = parallel.store()
        if self._key is None:  # once per fit, on every rank: the same number names this fit
            count = store.add(f"{_TERM_KEY}/fits", 1)
            self._key = f"{_TERM_KEY}/{(count - 1) // parallel.world_size}"
        if self._stop_at is None and self.received:
            self._stop_at = int(store.compare_set(self._key, "", str(step + 2 * every)))
        elif self._stop_at is None and store.check([self._key]):
            self._stop_at = int(store.get(self._key))
        return self._stop_at is not None and step >= self._stop_at


_TERM_KEY = "gpudoctor/sigterm"


def term_message(folder: str | Path | None, step: int) -> str:
    """What a run stopped by SIGTERM prints: where it saved, and that a rerun resumes."""
    if folder is None:
        return (f"gpudoctor: SIGTERM received; training stopped cleanly after step {step}. No checkpoint "
                "was written (checkpoint.dir is not set): set it so that a rerun resumes.\n")
    return (f"gpudoctor: SIGTERM received; training stopped cleanly after step {step} and saved "
            f"{checkpoint_path(folder, step)}. Run the same command again to resume from it "
            "(checkpoint.resume='auto').\n")


def write_term_message(folder: str | Path | None, step: int) -> None:
    sys.stderr.write(term_message(folder, step))
    sys.stderr.flush()
