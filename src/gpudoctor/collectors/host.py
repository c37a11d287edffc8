"""Host sampler (psutil): CPU, the busiest core, RAM, and the process tree under a root pid.

Command-line equivalent: ``top``/``htop`` for CPU and RAM, ``ps --ppid ROOT`` (recursively) for
the job's tree. The tree lets ``gpudoctor monitor --pid ROOT`` attribute GPU processes to a job:
a DataLoader worker or a torchrun child holding GPU memory shows up as part of it.

Seed 000 Q4 ("GPU-Util < 50 %, CPU at 100 %"): compare GPU utilization with the busiest core;
a Python process pinning one core while the GPU idles is the data-loader signature.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from gpudoctor.collectors.cadence import Every
from gpudoctor.collectors.periodic import PeriodicSampler
from gpudoctor.records.gpu import HostSample


def command_for_pid(pid: int) -> str:
    """The command line of ``pid`` (space-joined), or "" when it cannot be read.

    NVML reports host pids; inside a container (another pid namespace) they name no process or
    a different one (nvitop #75), so a failed lookup gives "" rather than an error. Not cached
    here: a pid is reused once its process ends, so the caller caches while it knows the process
    lives (``GpuSampler`` keeps a pid's command while the pid stays on the GPU, failures too).
    """
    try:
        import psutil

        return " ".join(psutil.Process(pid).cmdline())
    except Exception:  # NoSuchProcess, AccessDenied, ZombieProcess, psutil missing
        return ""


class HostSampler(PeriodicSampler[HostSample]):
    """Sample host CPU/RAM (and a process tree) every ``interval`` seconds on a daemon thread.

    Args:
        interval: seconds between samples (> 0).
        root_pid: a job's root process; its descendants are summed into ``tree_*`` fields.
        on_sample: called on the sampler thread with each sample; errors go to ``last_error``.
        maxlen: samples kept (7200 = one hour at 2 Hz).
        psutil_module: a psutil-like module (test seam); ``None`` imports psutil.
        clock: the wall clock for ``timestamp_s`` (the tree cadence runs on it too).
        tree_interval: seconds between listings of the tree's members (0 = every sample).
            Listing walks every process of the machine (psutil reads each ``/proc/PID/stat``
            and builds a new object per descendant); in between, only the known members are
            read, and one that exits is dropped at once. A new child shows up at the next
            listing.

    The thread (:class:`~gpudoctor.collectors.periodic.PeriodicSampler`) takes its first sample
    one interval after start: psutil measures CPU use between two calls, and the thread primes its
    own counters when it starts. A ``sample_once()`` before that is relative to the moment the
    sampler was created.
    """

    thread_name = "gpudoctor-host"
    sample_at_start = False

    def __init__(
        self,
        interval: float = 0.5,
        root_pid: int | None = None,
        on_sample: Callable[[HostSample], None] | None = None,
        maxlen: int = 7200,
        *,
        psutil_module: Any = None,
        clock: Callable[[], float] = time.time,
        tree_interval: float = 2.0,
    ) -> None:
        super().__init__(interval, on_sample, maxlen, hint=0.5)
        if not tree_interval >= 0:
            raise ValueError(
                f"tree_interval must be >= 0 seconds (0 = every sample), got {tree_interval!r}"
            )
        self._tree_every = Every(tree_interval, slack=interval / 4)
        self.root_pid = root_pid
        self.available = True
        self.unavailable_reason = ""
        self._clock = clock
        self._buffer: deque[HostSample] = deque(maxlen=maxlen)
        self._procs: dict[int, Any] = {}  # pid -> psutil.Process, kept for cpu_percent deltas
        self._ps = psutil_module
        if self._ps is None:
            try:
                import psutil

                self._ps = psutil
            except ImportError:
                self.available = False
                self.unavailable_reason = "psutil is not installed (pip install psutil)"
                return
        self._prime()

    def _prime(self) -> None:
        """Start psutil's CPU counters so the next reading covers a real interval.

        Recent psutil keeps this state per thread, so the sampler thread primes its own.
        """
        self._ps.cpu_percent(interval=None)
        self._ps.cpu_percent(interval=None, percpu=True)

    _thread_started = _prime

    def _tree(self, now: float) -> tuple[tuple[int, ...], float | None, int | None]:
        ps = self._ps
        if not self._procs or self._tree_every.due(now):
            try:
                root = self._procs.get(self.root_pid) or ps.Process(self.root_pid)
                members = [root, *root.children(recursive=True)]
            except Exception:  # the job ended or is not ours to see
                self._procs.clear()
                return (), None, None
            known = self._procs  # keep known objects: cpu_percent measures from their last call
            self._procs = {p.pid: known.get(p.pid, p) for p in members}
            self._tree_every.done(now)
        cpu, rss, pids, gone = 0.0, 0, [], []
        for pid, proc in self._procs.items():
            try:
                with proc.oneshot():
                    cpu += proc.cpu_percent(interval=None)
                    rss += proc.memory_info().rss
            except Exception:  # exited since the listing
                gone.append(pid)
                continue
            pids.append(pid)
        for pid in gone:
            del self._procs[pid]
        if self.root_pid in gone:  # the job ended: list again next time (and find nothing)
            self._procs.clear()
            return (), None, None
        return tuple(sorted(pids)), cpu, rss

    def sample_once(self) -> HostSample | None:
        """Read the host now, store the sample, call ``on_sample``, return it."""
        if not self.available:
            return None
        ps = self._ps
        now = self._clock()
        per_core = ps.cpu_percent(interval=None, percpu=True)
        mem = ps.virtual_memory()
        pids: tuple[int, ...] = ()
        tree_cpu = tree_rss = None
        if self.root_pid is not None:
            pids, tree_cpu, tree_rss = self._tree(now)
        sample = HostSample(
            timestamp_s=now,
            cpu_pct=float(ps.cpu_percent(interval=None)),
            busiest_core_pct=float(max(per_core)) if per_core else None,
            ram_used_bytes=int(mem.total - mem.available),
            ram_total_bytes=int(mem.total),
            tree_cpu_pct=tree_cpu,
            tree_rss_bytes=tree_rss,
            tree_pids=pids,
        )
        with self._lock:
            self._buffer.append(sample)
        self._deliver(sample)
        return sample

    def samples(self) -> list[HostSample]:
        """Samples in the ring buffer, oldest first."""
        with self._lock:
            return list(self._buffer)

    def latest(self) -> HostSample | None:
        with self._lock:
            return self._buffer[-1] if self._buffer else None
