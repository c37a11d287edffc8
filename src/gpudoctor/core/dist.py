"""The torchrun environment: rank, local rank, world size — read from the variables torchrun sets.

Nothing here initialises a process group by itself; :func:`init_distributed` does it in the order
that avoids every rank landing on GPU 0: set_device -> init_process_group(device_id=...).
"""

from __future__ import annotations

import datetime
import os
from typing import TYPE_CHECKING

from gpudoctor.records.base import record

if TYPE_CHECKING:  # pragma: no cover
    import torch


@record
class DistEnv:
    """Where this process sits in a torchrun job. A plain ``python x.py`` is rank 0 of 1."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    master_addr: str = ""
    master_port: str = ""

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _int_env(environ: dict[str, str] | os._Environ[str], name: str, default: int) -> int:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer; unset it or let torchrun set it") from None


def dist_env(environ: dict[str, str] | None = None) -> DistEnv:
    """Read rank, local rank and world size from ``environ`` (default: ``os.environ``).

    Raises ``ValueError`` when the variables contradict each other (e.g. ``RANK`` >= ``WORLD_SIZE``),
    which is what a stray ``RANK`` or ``NODE_RANK`` left in a shell produces.
    """
    env = os.environ if environ is None else environ
    world_size = _int_env(env, "WORLD_SIZE", 1)
    rank = _int_env(env, "RANK", 0)
    local_rank = _int_env(env, "LOCAL_RANK", 0)
    local_world_size = _int_env(env, "LOCAL_WORLD_SIZE", world_size)
    if world_size < 1:
        raise ValueError(f"WORLD_SIZE={world_size} must be at least 1")
    if not 0 <= rank < world_size:
        raise ValueError(
            f"RANK={rank} is outside 0..WORLD_SIZE-1 ({world_size - 1}); a stale RANK/WORLD_SIZE "
            "in the shell? Unset them and start with torchrun"
        )
    if not 0 <= local_rank < max(local_world_size, 1):
        raise ValueError(f"LOCAL_RANK={local_rank} is outside 0..LOCAL_WORLD_SIZE-1")
    return DistEnv(
        rank=rank,
        local_rank=local_rank,
        world_size=world_size,
        local_world_size=local_world_size,
        master_addr=env.get("MASTER_ADDR", ""),
        master_port=env.get("MASTER_PORT", ""),
    )


def init_distributed(
    env: DistEnv, device: torch.device, *, timeout_s: float = 600.0, backend: str | None = None
) -> bool:
    """Join the process group torchrun prepared, binding this rank's GPU first.

    Order matters (seed 002 §3.4): ``torch.cuda.set_device`` before ``init_process_group``,
    and ``device_id`` passed so NCCL creates its communicator on the right GPU eagerly.
    Does nothing for a single process or when the group already exists. Returns whether it
    created the group (its creator is the one to end it: :func:`destroy_distributed`).
    """
    import torch
    import torch.distributed as dist

    if not env.is_distributed or dist.is_initialized():
        return False
    kwargs: dict = {"timeout": datetime.timedelta(seconds=timeout_s)}
    if device.type == "cuda":
        torch.cuda.set_device(device)
        kwargs["device_id"] = device
    dist.init_process_group(backend=backend or ("nccl" if device.type == "cuda" else "gloo"), **kwargs)
    return True


def destroy_distributed(*, synchronize: bool = True) -> None:
    """Leave the process group if one exists; call it at the clean end of every rank.

    ``synchronize``: the ranks first meet at a barrier, so none tears down while another is still
    in a collective. Pass ``False`` on an error path, where a rank must not wait for the others.

    Under gloo, a worker thread releases each finished collective a moment after the caller saw it
    complete, and releasing it takes the GIL. A process that reaches interpreter shutdown inside
    that moment aborts ("terminate called without an active exception", SIGABRT), so torchrun
    reports a finished job as failed (PyTorch issue 190489). A barrier does not close that moment
    (it holds the finished collective and releases it the same way), so this also waits until the
    process's other threads have stopped running (:func:`wait_for_idle_threads`).
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    gloo = dist.get_backend() == "gloo"
    if synchronize:
        dist.barrier()
    dist.destroy_process_group()
    if gloo:
        wait_for_idle_threads()


def wait_for_idle_threads(timeout_s: float = 0.5, poll_s: float = 0.001) -> bool:
    """Wait until no other thread of this process is running, seen twice in a row (Linux).

    Between looks the GIL is free, so a thread waiting for it gets it and finishes a short piece of
    work (gloo's release of a collective is microseconds); a thread that stays runnable (a busy
    user thread) ends the wait at ``timeout_s``. Returns whether the threads went idle (``False``
    also where ``/proc`` is missing: nothing to look at).
    """
    import threading
    import time

    tasks = "/proc/self/task"
    if not os.path.isdir(tasks):
        return False
    me = str(threading.get_native_id())
    deadline = time.monotonic() + timeout_s
    idle_looks = 0
    while time.monotonic() < deadline:
        time.sleep(poll_s)  # frees the GIL
        busy = any(_running(tasks, tid) for tid in os.listdir(tasks) if tid != me)
        idle_looks = 0 if busy else idle_looks + 1
        if idle_looks == 2:
            return True
    return False


def _running(tasks: str, tid: str) -> bool:
    """Whether thread ``tid`` is running or runnable (state ``R`` in its ``stat``)."""
    try:
        with open(f"{tasks}/{tid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:  # the thread ended meanwhile
        return False
    return stat[stat.rindex(")") + 2:].startswith("R")
