"""Background NVML sampler: a stream of :class:`~gpudoctor.records.gpu.GpuSample` records.

Command-line equivalent::

    nvidia-smi --query-gpu=timestamp,name,utilization.gpu,utilization.memory,memory.total,\
memory.used,memory.free,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.mem,\
clocks_event_reasons.active,ecc.errors.uncorrected.volatile.total --format=csv -lms 200
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv
    nvidia-smi dmon -s t          # PCIe rx/tx

One daemon thread reads NVML through cached device handles: no ``nvidia-smi`` subprocess per
sample (Lightning #189 slowed training 10x that way; gpustat #54 burnt 80% CPU re-opening
handles). Ticks sit on absolute deadlines (:mod:`gpudoctor.collectors.cadence`), so the achieved
rate is the asked rate. Every sample reads the core metrics (utilization, memory, temperature,
power, clocks, clock-event reasons); the costly or slow-changing ones are read on their own
cadence and repeated in between: the per-process list (a heavy driver query; command lines are
looked up once per pid while it stays on the GPU), PCIe rx/tx (each counter blocks ~20 ms in the
driver; at most one GPU's counters are refreshed per tick, so the loop never stalls for all GPUs
at once), and the enforced power limit and volatile ECC count (they change when an administrator
acts or a fault happens). When NVML or the driver is absent the sampler does nothing and says why in
``unavailable_reason``; a metric one device cannot give is ``None`` and its reason is kept in
``GpuSample.unavailable`` (the same dict object for every sample of that GPU until it changes).

Reading one GPU (its cached handle, what it cannot give, each metric on its cadence) lives in
:mod:`gpudoctor.collectors.nvml_device`; this module opens NVML, schedules the reads and keeps the
samples.

Test seam: ``GpuSampler(nvml=fake)`` takes any module-like object with pynvml's function names;
the CLI calls :func:`default_nvml`, which tests replace with ``monkeypatch``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from gpudoctor.collectors.cadence import Every
from gpudoctor.collectors.nvml_device import CLOCK_EVENT_REASONS, Device, decode_clock_event_reasons
from gpudoctor.collectors.nvml_extras import identity, normalise_bus_id
from gpudoctor.collectors.periodic import PeriodicSampler
from gpudoctor.records.gpu import GpuSample


def resolve_gpus(selectors: Sequence[int | str], count: int,
                 ids: dict[int, tuple[str, str]]) -> list[int]:
    """NVML indices of ``selectors`` (``nvidia-smi -i``'s forms): an index, a UUID (``GPU-…``,
    or a unique prefix of one) or a PCI bus id (``00000000:07:00.0``, ``07:00.0``).

    ``ids``: index -> (UUID, bus id). ``ValueError`` naming the GPUs that exist when one does
    not match, or matches twice over.
    """
    out: list[int] = []
    for sel in selectors:
        if isinstance(sel, int) or str(sel).isdigit():
            i = int(sel)
            if not 0 <= i < count:
                raise ValueError(
                    f"GPU index {i} does not exist: this machine has {count} GPU(s), indices "
                    f"0-{count - 1}" if count else f"GPU index {i} does not exist: NVML sees no GPU")
        else:
            text = str(sel).strip()
            bus = normalise_bus_id(text)
            hits = [j for j, (uuid, b) in ids.items()
                    if (uuid and uuid.lower().startswith(text.lower()))
                    or (b and normalise_bus_id(b) == bus)]
            if len(hits) != 1:
                known = "; ".join(f"{j}: {u or '?'} at {b or '?'}" for j, (u, b) in sorted(ids.items()))
                what = "matches no GPU" if not hits else "matches several GPUs"
                raise ValueError(f"{text!r} {what}; the GPUs here are {known or 'none'}")
            i = hits[0]
        if i in out:
            raise ValueError(f"GPU {i} is selected twice ({sel!r}); list each GPU once")
        out.append(i)
    return out


def default_nvml() -> Any:
    """Import and return ``pynvml`` (nvidia-ml-py). Tests monkeypatch this function."""
    import pynvml

    return pynvml


class GpuSampler(PeriodicSampler[GpuSample]):
    """Sample NVML every ``interval`` seconds on a daemon thread into a bounded ring buffer.

    Args:
        interval: seconds between samples (> 0; the CLI allows 0.1 and up).
        indices: GPUs to watch, as ``nvidia-smi -i`` takes them: NVML indices, UUIDs (or a
            unique prefix) or PCI bus ids (:func:`resolve_gpus`); ``None`` = every GPU. One that
            does not exist raises ``ValueError`` (listing those that do) on first use.
        on_sample: called on the sampler thread with each new sample (e.g. a log writer);
            an exception there is kept in ``last_error`` and sampling goes on.
        maxlen: samples kept per GPU (36000 = one hour at 10 Hz).
        nvml: a pynvml-like module; ``None`` = :func:`default_nvml`.
        processes: read per-process GPU memory and command lines.
        pcie: read PCIe rx/tx (``nvmlDeviceGetPcieThroughput`` waits ~20 ms per call in the
            driver, off the GIL).
        clock: the wall clock for ``timestamp_s``; the slower cadences below run on it too.
        process_interval: seconds between reads of the per-process list (0 = every sample);
            samples in between repeat the last list.
        pcie_interval: seconds between PCIe reads of one GPU (0 = every sample); at most one
            GPU is refreshed per tick after the first sample, the longest-waiting first.
        slow_interval: seconds between reads of the enforced power limit and the volatile
            uncorrected ECC count.
        monotonic: the clock the thread schedules on (test seam).

    Usage::

        with GpuSampler(interval=0.2) as s:
            train()
        samples = s.samples()

    The thread, ``start``/``stop`` and the callback are
    :class:`~gpudoctor.collectors.periodic.PeriodicSampler`'s; ``stop`` also shuts NVML down.
    """

    thread_name = "gpudoctor-nvml"

    def __init__(
        self,
        interval: float = 0.2,
        indices: Sequence[int | str] | None = None,
        on_sample: Callable[[GpuSample], None] | None = None,
        maxlen: int = 36000,
        *,
        nvml: Any = None,
        processes: bool = True,
        pcie: bool = True,
        clock: Callable[[], float] = time.time,
        process_interval: float = 1.0,
        pcie_interval: float = 1.0,
        slow_interval: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(interval, on_sample, maxlen, hint=0.2, monotonic=monotonic)
        for what, value in (("process_interval", process_interval),
                            ("pcie_interval", pcie_interval), ("slow_interval", slow_interval)):
            if not value >= 0:
                raise ValueError(f"{what} must be >= 0 seconds (0 = every sample), got {value!r}")
        self.process_interval = float(process_interval)
        self.pcie_interval = float(pcie_interval)
        self.slow_interval = float(slow_interval)
        self.indices = None if indices is None else tuple(indices)
        self.processes = processes
        self.pcie = pcie
        self._nvml = nvml
        self._clock = clock
        self._opened = False
        self._initialised = False
        self._reason = ""
        self._devices: list[Device] = []
        self._buffers: dict[int, deque[GpuSample]] = {}

    # -- opening NVML -------------------------------------------------------------------------
    @property
    def available(self) -> bool:
        """True when NVML started and there is at least one GPU to watch."""
        self._open()
        return not self._reason

    @property
    def unavailable_reason(self) -> str:
        """Why nothing is sampled ("" when sampling works)."""
        self._open()
        return self._reason

    @property
    def device_names(self) -> dict[int, str]:
        """NVML index -> product name of the watched GPUs."""
        self._open()
        return {d.index: d.name for d in self._devices}

    def _open(self) -> None:
        if self._opened:
            return
        self._opened = True
        if self._nvml is None:
            try:
                self._nvml = default_nvml()
            except ImportError:
                self._reason = "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
                return
        nv = self._nvml
        try:
            nv.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            self._reason = (
                f"NVML could not start ({exc}): no NVIDIA driver is loaded or visible here; "
                "check `nvidia-smi` and, in a container, `--gpus all`"
            )
            return
        self._initialised = True
        try:
            count = int(nv.nvmlDeviceGetCount())
        except Exception as exc:
            self._reason = f"NVML could not count the GPUs ({exc})"
            return
        ids: dict[int, tuple[str, str]] = {}
        if self.indices is not None and any(isinstance(i, str) for i in self.indices):
            ids = self._identities(count)
        try:
            wanted = range(count) if self.indices is None else resolve_gpus(self.indices, count, ids)
        except ValueError:
            self._close()
            raise
        for i in wanted:
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(i)
                name = nv.nvmlDeviceGetName(handle)
            except Exception as exc:
                self._reason = f"GPU {i} could not be opened ({exc})"
                continue
            name = name.decode() if isinstance(name, bytes) else str(name)
            slack = self.interval / 4  # scheduling jitter must not push a read one tick late
            uuid, bus = ids[i] if i in ids else identity(nv, handle)
            self._devices.append(Device(
                nv, i, handle, name, procs=Every(self.process_interval, slack),
                pcie=Every(self.pcie_interval, slack), slow=Every(self.slow_interval, slack),
                extras_every=Every(self.process_interval, slack), uuid=uuid, pci_bus_id=bus,
            ))
            if not self.pcie:
                self._devices[-1].unavailable = {"pcie": "not sampled (pcie=False)"}
            self._buffers.setdefault(i, deque(maxlen=self.maxlen))
        if self._devices:
            self._reason = ""
        elif not self._reason:
            self._reason = "NVML is running but sees no GPU"

    def _identities(self, count: int) -> dict[int, tuple[str, str]]:
        """index -> (UUID, PCI bus id) of every GPU, to resolve selectors that name them."""
        out = {}
        for i in range(count):
            try:
                out[i] = identity(self._nvml, self._nvml.nvmlDeviceGetHandleByIndex(i))
            except Exception:
                out[i] = ("", "")
        return out

    def _stopped(self) -> None:
        self._close()

    def _close(self) -> None:
        self._opened = False  # a later start() opens NVML again; the ring buffers stay
        self._devices = []
        if self._initialised:
            self._initialised = False
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # shutting down must never turn a clean stop into a crash
                pass

    # -- choosing what to read -----------------------------------------------------------------
    def _pcie_due(self, now: float) -> set[int]:
        """GPUs whose PCIe counters are read this tick.

        Never-read GPUs all at once (a first sample or ``--once`` is complete); after that at
        most one GPU per tick, the longest-overdue first, so a tick blocks for one GPU's 40 ms
        at most however many GPUs are watched.
        """
        if not self.pcie:
            return set()
        due = [
            d for d in self._devices
            if d.pcie_every.due(now) and not (d.unavailable and "pcie" in d.unavailable)
        ]
        fresh = {d.index for d in due if d.pcie_every.last is None}
        if fresh or not due:
            return fresh
        return {max(due, key=lambda d: d.pcie_every.overdue_by(now)).index}

    # -- sampling -----------------------------------------------------------------------------
    def sample_once(self) -> list[GpuSample]:
        """Read every watched GPU now, store the samples, call ``on_sample``, return them."""
        self._open()
        now = self._clock()
        pcie = self._pcie_due(now)
        out = [dev.sample(now, pcie_now=dev.index in pcie, processes=self.processes) for dev in self._devices]
        with self._lock:
            for s in out:
                self._buffers[s.index].append(s)
        for s in out:
            self._deliver(s)
        return out

    def samples(self) -> list[GpuSample]:
        """Samples in the ring buffer, oldest first (by time, then GPU index)."""
        with self._lock:
            out = [s for buf in self._buffers.values() for s in buf]
        out.sort(key=lambda s: (s.timestamp_s, s.index))
        return out

    def latest(self) -> dict[int, GpuSample]:
        """The newest sample of each watched GPU."""
        with self._lock:
            return {i: buf[-1] for i, buf in self._buffers.items() if buf}

    def history(self, index: int, n: int) -> list[GpuSample]:
        """The newest ``n`` samples of GPU ``index``, oldest first."""
        with self._lock:
            buf = self._buffers.get(index, ())
            return list(buf)[-n:] if n < len(buf) else list(buf)


__all__ = [
    "CLOCK_EVENT_REASONS", "GpuSampler", "decode_clock_event_reasons", "default_nvml", "resolve_gpus",
]
