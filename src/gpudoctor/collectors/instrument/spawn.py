"""``torch.multiprocessing.spawn`` / ``start_processes`` ranks are probed, with their rank.

The probed parent's ``start_processes`` is wrapped: while it starts the processes it sets
``GPUDOCTOR_SPAWN_PARENT`` to its pid, which tells the children's ``sitecustomize`` that they are
ranks (other interpreters below a probed process are left alone), and it hands each child its
function wrapped in :class:`RankFn`, which records the spawn index as the rank until
``init_process_group`` says otherwise, and writes the records when the function returns (a
``fork``-started child never runs ``atexit``). The join loop is torch's own.

Any other ``multiprocessing`` process a probed process starts before its first optimizer step
(Hogwild's ``mp.Process(target=train)``; not a DataLoader worker, not a spawn rank) runs unprobed;
its target is written to ``children-pid{N}.txt`` in the run directory, so that a run whose
probed process never steps can say where its training went (:func:`unprobed_children`).
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

from gpudoctor.collectors.instrument import ENV_SPAWN_PARENT


class RankFn:
    """``fn`` as a rank's entry point (picklable when ``fn`` is: the ``spawn`` start method)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __call__(self, index: int, *args: Any) -> Any:
        _become_rank(index)
        try:
            return self.fn(index, *args)
        finally:
            from gpudoctor.collectors.instrument import ending

            ending.finish("exit")


def _become_rank(index: int) -> None:
    from gpudoctor.collectors.instrument import stackdump
    from gpudoctor.collectors.instrument.state import S, is_owner

    if not S.installed:
        return
    if not is_owner():  # a forked child: the parent's probe state came along; start afresh
        S.adopt()
        assert S.run_dir is not None
        stackdump.reinstall(S.run_dir, index)
    if "RANK" not in os.environ and S.step == 0:
        S.rank = index
    stackdump.note_rank(S.rank)


CHILDREN_PREFIX = "children-pid"
_LOADER_WORKER = "torch.utils.data._utils.worker"


def _watch_process_start() -> None:
    """Note the target of each ``multiprocessing`` process started before the first step."""
    import multiprocessing.process as mp_process

    original = mp_process.BaseProcess.start
    if getattr(original, "_gpudoctor", False):
        return

    @functools.wraps(original)
    def start(self: Any) -> None:
        try:
            _note_child(getattr(self, "_target", None))
        except Exception:  # noqa: BLE001 - a probe never breaks the script
            pass
        return original(self)

    start._gpudoctor = True  # type: ignore[attr-defined]
    mp_process.BaseProcess.start = start  # type: ignore[method-assign]


def _note_child(target: Any) -> None:
    from gpudoctor.collectors.instrument.state import S, is_owner

    if target is None or not is_owner() or S.step > 0 or S.run_dir is None:
        return
    module = getattr(target, "__module__", "") or ""
    if module.startswith(_LOADER_WORKER) or os.environ.get(ENV_SPAWN_PARENT) or isinstance(target, RankFn):
        return
    name = f"{module}.{getattr(target, '__qualname__', type(target).__name__)}"
    fd = os.open(S.run_dir / f"{CHILDREN_PREFIX}{os.getpid()}.txt",
                 os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (name + "\n").encode())
    finally:
        os.close(fd)


def unprobed_children(run_dir: Any) -> list[str]:
    """The targets noted by :func:`_note_child`, in the order they started (parent side)."""
    from pathlib import Path

    names: list[str] = []
    for f in sorted(Path(run_dir).glob(f"{CHILDREN_PREFIX}*.txt")):
        names += [line for line in f.read_text(errors="replace").splitlines() if line]
    return names


def install() -> None:
    """Wrap ``torch.multiprocessing.start_processes`` (``spawn`` calls it) in this process, and
    note other processes it starts before its first step."""
    import torch.multiprocessing  # noqa: F401 - loads the submodule

    _watch_process_start()
    module = sys.modules.get("torch.multiprocessing.spawn")
    original = getattr(module, "start_processes", None)
    if original is None or getattr(original, "_gpudoctor", False):
        return

    @functools.wraps(original)
    def start_processes(fn: Any, args: tuple = (), nprocs: int = 1, join: bool = True,
                        daemon: bool = False, start_method: str = "spawn") -> Any:
        previous = os.environ.get(ENV_SPAWN_PARENT)
        os.environ[ENV_SPAWN_PARENT] = str(os.getpid())
        try:
            context = original(RankFn(fn), args, nprocs, False, daemon, start_method)
        finally:
            if previous is None:
                os.environ.pop(ENV_SPAWN_PARENT, None)
            else:
                os.environ[ENV_SPAWN_PARENT] = previous
        if not join:
            return context
        while not context.join():  # torch's own join loop
            pass
        return None

    start_processes._gpudoctor = True  # type: ignore[attr-defined]
    module.start_processes = start_processes  # type: ignore[union-attr]
    torch.multiprocessing.start_processes = start_processes
