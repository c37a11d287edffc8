"""Every probed process can be asked for its Python stacks: ``faulthandler`` on a signal.

At install each probed process opens ``stacks-pid{PID}.txt`` in the run directory, writes a
header (its pid, its main thread's id, its rank once known) and registers
``faulthandler.register(STACK_SIGNAL, all_threads=True)`` on it. When the run stalls or is
interrupted, ``gpudoctor run`` sends :data:`STACK_SIGNAL` to each such process before stopping
it: faulthandler writes every thread's stack from its C signal handler, so a process blocked in
C (a sleep, a lock, a gloo or NCCL wait) answers too. Where faulthandler was not already enabled
it is also enabled on the same file, so a fatal error (segfault, ``abort()``) leaves the stacks
of the crash there. The parent renames the files by rank at the end and removes empty ones
(:mod:`gpudoctor.collectors.stacks`).

A script that installed its own handler for :data:`STACK_SIGNAL` keeps it (no stacks then).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import threading
from pathlib import Path
from typing import IO

STACK_SIGNAL = signal.SIGUSR2
HEADER = "# gpudoctor stacks"

_file: IO[str] | None = None
_rank: int | None = None
_enabled = False  # faulthandler.enable was ours


def install(run_dir: Path, rank: int) -> None:
    """Register the stack dump for this process (``rank`` -1: not known yet). Never raises."""
    global _file, _rank, _enabled
    try:
        if signal.getsignal(STACK_SIGNAL) not in (signal.SIG_DFL, None):
            return  # the script's own handler
        fh = open(run_dir / f"stacks-pid{os.getpid()}.txt", "a", encoding="utf-8")  # noqa: SIM115 - kept open
        main = threading.main_thread().ident or 0
        fh.write(f"{HEADER}: pid {os.getpid()} main thread 0x{main:016x}\n")
        if rank >= 0:
            fh.write(f"# rank {rank}\n")
            _rank = rank
        fh.flush()
        faulthandler.register(STACK_SIGNAL, file=fh, all_threads=True, chain=False)
        if not faulthandler.is_enabled():
            faulthandler.enable(file=fh, all_threads=True)
            _enabled = True
        _file = fh
        os.register_at_fork(after_in_child=_forget)  # a forked DataLoader worker is not a rank
    except (OSError, ValueError, RuntimeError, AttributeError):
        pass


def note_rank(rank: int) -> None:
    """Record this process's rank in its stacks file (the last ``# rank`` line counts)."""
    global _rank
    if _file is None or rank == _rank:
        return
    try:
        _file.write(f"# rank {rank}\n")
        _file.flush()
        _rank = rank
    except (OSError, ValueError):
        pass


def _forget() -> None:
    global _file, _rank, _enabled
    if _file is None:
        return
    try:
        faulthandler.unregister(STACK_SIGNAL)
        if _enabled:
            faulthandler.disable()
    except (RuntimeError, ValueError):
        pass
    _file, _rank, _enabled = None, None, False


def reinstall(run_dir: Path, rank: int) -> None:
    """In a forked training rank (``start_processes(start_method="fork")``): its own file."""
    _forget()
    install(run_dir, rank)
