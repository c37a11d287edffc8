"""Write each step's record to ``steps-rank{N}.jsonl`` at its boundary, so a hard crash keeps it.

Every boundary appends with one ``os.write`` on an ``O_APPEND`` descriptor: the bytes are in
the kernel's page cache when the call returns, so they survive the process dying right after
(segfault, ``abort()``, SIGKILL, an NCCL abort) — only a machine crash loses them. No Python
buffering, no flush cadence.

A step whose lazily read values (GPU time, loss, GradScaler scale) are not in yet is written at
once with what is known — a *provisional* line — and written again, complete, when they arrive
(or after :data:`~gpudoctor.collectors.instrument.state.MAX_LAG_STEPS` steps without them). The
reader keeps the last line of each step (:func:`gpudoctor.records.rundir.read_steps`), so a crash
leaves every step up to the last boundary on disk, some without their late values.

Cost (this CPU, ``python benchmarks/step_append_cost.py``): see docs/run.md, "Cost".
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from gpudoctor.collectors.instrument.state import MAX_LAG_STEPS, S
from gpudoctor.records.base import SCHEMA_VERSION, to_dict
from gpudoctor.records.rundir import KIND_STEPS, steps_file

_ENCODE = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


class StepFile:
    """An append-only JSON Lines file written with one unbuffered ``os.write`` per call."""

    def __init__(self, path: Path, *, kind: str) -> None:
        self.path = path
        # O_CLOEXEC: a subprocess the script starts does not inherit the descriptor.
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        if os.fstat(self._fd).st_size == 0:
            self._write((json.dumps({"schema_version": SCHEMA_VERSION, "kind": kind}) + "\n").encode())

    def write_lines(self, lines: list[str]) -> None:
        if lines and self._fd is not None:
            self._write(("\n".join(lines) + "\n").encode())

    def _write(self, data: bytes) -> None:
        assert self._fd is not None
        view = memoryview(data)
        while view:  # a regular file takes it in one call; a signal may cut a write short
            view = view[os.write(self._fd, view):]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def step_line(fields: dict[str, Any]) -> str:
    """One step's fields as one JSON line (the :class:`~gpudoctor.records.step.StepRecord` layout).

    The fast path encodes the flat mapping directly (``mem`` is already plain data); a value JSON
    cannot hold (a NaN loss) falls back to the record's own converter.
    """
    try:
        return _ENCODE(fields)
    except ValueError:
        return _slow_line(fields)


def _slow_line(fields: dict[str, Any]) -> str:
    plain = {k: (to_dict(v) if k != "mem" else v) for k, v in fields.items()}
    return json.dumps(plain, separators=(",", ":"), allow_nan=False)


def flush_ready(*, final: bool = False) -> None:
    """Append the records due now, in one ``os.write`` (see the module docstring).

    Every step is on disk from its own boundary on: complete when nothing is still to come,
    else provisional (written again once its late values are in). ``final`` writes everything.
    """
    if not S.pending:
        return
    lines: list[str] = []
    last = S.step - 1  # the step that just ended: its GradScaler scale follows (update())
    for step in sorted(S.pending):
        fields = S.pending[step]
        done = final or not S.waiting.get(step) and (step < last or not S.scaler_seen)
        if done or S.step - step > MAX_LAG_STEPS:
            S.pending.pop(step)
            S.waiting.pop(step, None)
            if step not in S.written or step in S.changed:
                lines.append(step_line(fields))
            S.written.discard(step)
            S.changed.discard(step)
        elif step not in S.written:
            lines.append(step_line(fields))
            S.written.add(step)
            S.changed.discard(step)
    if not lines:
        return
    if S.writer is None:
        assert S.run_dir is not None
        _settle_rank()
        S.writer = StepFile(S.run_dir / steps_file(S.rank), kind=KIND_STEPS)
    S.writer.write_lines(lines)


def _settle_rank() -> None:
    """Before the first record: the process group's rank wins (``torch.multiprocessing.spawn``
    ranks pass it to ``init_process_group`` and have no ``RANK`` variable)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        rank = dist.get_rank()
        if rank != S.rank:
            S.rank = rank
            for step in S.pending.values():
                step["rank"] = rank
    from gpudoctor.collectors.instrument import stackdump

    stackdump.note_rank(S.rank)
