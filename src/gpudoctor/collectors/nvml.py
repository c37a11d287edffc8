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

Test seam: ``GpuSampler(nvml=fake)`` takes any module-like object with pynvml's function names;
the CLI calls :func:`default_nvml`, which tests replace with ``monkeypatch``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from gpudoctor.collectors.cadence import Deadlines, Every
from gpudoctor.collectors.host import command_for_pid
from gpudoctor.records.gpu import GpuProcess, GpuSample

# nvmlClocksEventReason* bits (nvml.h); the older "throttle reasons" call uses the same bits.
CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)

# errors after which asking again is pointless (the device or driver cannot give the metric)
_PERMANENT = ("NVMLError_NotSupported", "NVMLError_NoPermission", "NVMLError_FunctionNotFound")


def default_nvml() -> Any:
    """Import and return ``pynvml`` (nvidia-ml-py). Tests monkeypatch this function."""
    import pynvml

    return pynvml


def decode_clock_event_reasons(mask: int) -> tuple[str, ...]:
    """Names of the bits set in an NVML clock-event (throttle) reason mask, lowest bit first."""
    names = [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]
    unknown = mask & ~sum(bit for bit, _ in CLOCK_EVENT_REASONS)
    if unknown:
        names.append(f"other_0x{unknown:x}")
    return tuple(names)


class _Device:
    """Everything cached for one GPU: its handle, name, and what it cannot give."""

    __slots__ = (
        "index", "handle", "name", "unavailable", "transient", "ecc_on", "last_procs", "reasons",
        "commands", "procs_every", "pcie_every", "slow_every", "pcie", "power_limit", "ecc_count",
    )

    def __init__(
        self, index: int, handle: Any, name: str, *, procs: Every, pcie: Every, slow: Every
    ) -> None:
        self.index = index
        self.handle = handle
        self.name = name
        self.unavailable: dict[str, str] | None = None  # replaced, never mutated, when it grows
        self.transient: dict[str, str] = {}  # errors of this sample only (retried next time)
        self.ecc_on: bool | None = None
        self.last_procs: tuple[GpuProcess, ...] = ()
        self.reasons: dict[int, tuple[str, ...]] = {}
        # pid -> command line of the processes of the last list; a pid that leaves the list is
        # dropped, so a reused pid is looked up again
        self.commands: dict[int, str] = {}
        self.procs_every, self.pcie_every, self.slow_every = procs, pcie, slow
        self.pcie: tuple[float | None, float | None] = (None, None)  # last rx, tx (B/s)
        self.power_limit: float | None = None  # W, last read
        self.ecc_count: int | None = None  # last read


class GpuSampler:
    """Sample NVML every ``interval`` seconds on a daemon thread into a bounded ring buffer.

    Args:
        interval: seconds between samples (> 0; the CLI allows 0.1 and up).
        indices: NVML device indices to watch (``nvidia-smi -i``); ``None`` = every GPU. An
            index that does not exist raises ``ValueError`` (listing those that do) on first use.
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
    """

    def __init__(
        self,
        interval: float = 0.2,
        indices: Sequence[int] | None = None,
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
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval!r}; try 0.2")
        if maxlen < 1:
            raise ValueError(f"maxlen must be at least 1, got {maxlen!r}")
        for what, value in (("process_interval", process_interval),
                            ("pcie_interval", pcie_interval), ("slow_interval", slow_interval)):
            if not value >= 0:
                raise ValueError(f"{what} must be >= 0 seconds (0 = every sample), got {value!r}")
        self.process_interval = float(process_interval)
        self.pcie_interval = float(pcie_interval)
        self.slow_interval = float(slow_interval)
        self._monotonic = monotonic
        self.skipped_ticks = 0  # ticks the thread missed because a sample ran past its deadline
        self.interval = float(interval)
        self.indices = None if indices is None else tuple(indices)
        self.on_sample = on_sample
        self.maxlen = maxlen
        self.processes = processes
        self.pcie = pcie
        self.last_error: BaseException | None = None
        self._nvml = nvml
        self._clock = clock
        self._opened = False
        self._initialised = False
        self._reason = ""
        self._devices: list[_Device] = []
        self._buffers: dict[int, deque[GpuSample]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cpu_s = 0.0

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
        wanted = range(count) if self.indices is None else self.indices
        bad = [i for i in wanted if not 0 <= i < count]
        if bad:
            self._close()
            raise ValueError(
                f"GPU index {', '.join(map(str, bad))} does not exist: this machine has "
                f"{count} GPU(s), indices 0-{count - 1}" if count else
                f"GPU index {', '.join(map(str, bad))} does not exist: NVML sees no GPU"
            )
        for i in wanted:
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(i)
                name = nv.nvmlDeviceGetName(handle)
            except Exception as exc:
                self._reason = f"GPU {i} could not be opened ({exc})"
                continue
            name = name.decode() if isinstance(name, bytes) else str(name)
            slack = self.interval / 4  # scheduling jitter must not push a read one tick late
            self._devices.append(_Device(
                i, handle, name, procs=Every(self.process_interval, slack),
                pcie=Every(self.pcie_interval, slack), slow=Every(self.slow_interval, slack),
            ))
            if not self.pcie:
                self._devices[-1].unavailable = {"pcie": "not sampled (pcie=False)"}
            self._buffers.setdefault(i, deque(maxlen=self.maxlen))
        if self._devices:
            self._reason = ""
        elif not self._reason:
            self._reason = "NVML is running but sees no GPU"

    def _close(self) -> None:
        self._opened = False  # a later start() opens NVML again; the ring buffers stay
        self._devices = []
        if self._initialised:
            self._initialised = False
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # shutting down must never turn a clean stop into a crash
                pass

    # -- reading one device -------------------------------------------------------------------
    def _read(self, dev: _Device, metric: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Call ``fn(*args)``; on an NVML error return None and keep the reason for ``metric``."""
        if dev.unavailable is not None and metric in dev.unavailable:
            return None
        try:
            return fn(*args)
        except Exception as exc:
            kind = type(exc).__name__
            if kind in _PERMANENT or any(
                isinstance(exc, getattr(self._nvml, k, ())) for k in _PERMANENT
            ):
                reason = "not supported by this GPU or driver" if "NotSupported" in kind else str(exc)
                dev.unavailable = {**(dev.unavailable or {}), metric: reason}
            else:  # e.g. NVMLError_Unknown, GpuIsLost: say so for this sample, ask again next time
                dev.transient[metric] = f"{kind}: {exc}"
            return None

    def _sample_device(self, dev: _Device, now: float, pcie_now: bool) -> GpuSample:
        nv, h, read = self._nvml, dev.handle, self._read
        dev.transient = {}
        util = read(dev, "utilization", nv.nvmlDeviceGetUtilizationRates, h)
        mem = read(dev, "memory", nv.nvmlDeviceGetMemoryInfo, h)
        temp = read(dev, "temperature", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
        power = read(dev, "power", nv.nvmlDeviceGetPowerUsage, h)
        slow = dev.slow_every.due(now)  # power limit and ECC count (reads in nvidia-smi order)
        if slow:
            limit = read(dev, "power_limit", nv.nvmlDeviceGetEnforcedPowerLimit, h)
            dev.power_limit = None if limit is None else limit / 1000.0
        sm = read(dev, "sm_clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
        memclk = read(dev, "mem_clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM)
        if pcie_now:
            self._read_pcie(dev, now)
        mask = read(dev, "clock_event_reasons", self._reasons_mask, h)
        reasons: tuple[str, ...] = ()
        if mask is not None:
            reasons = dev.reasons.get(mask) or dev.reasons.setdefault(
                mask, decode_clock_event_reasons(int(mask))
            )
        if slow:
            dev.ecc_count = self._ecc(dev)
            if "power_limit" not in dev.transient and "ecc" not in dev.transient:
                dev.slow_every.done(now)  # a failed read stays due and is retried next sample
        procs: tuple[GpuProcess, ...] = ()
        if self.processes:
            if dev.procs_every.due(now):
                procs = self._processes(dev, now)
            else:
                procs = dev.last_procs
        rx, tx = dev.pcie
        return GpuSample(
            timestamp_s=now,
            index=dev.index,
            name=dev.name,
            util_gpu_pct=None if util is None else float(util.gpu),
            util_mem_pct=None if util is None else float(util.memory),
            mem_total_bytes=None if mem is None else int(mem.total),
            mem_used_bytes=None if mem is None else int(mem.used),
            mem_free_bytes=None if mem is None else int(mem.free),
            temperature_c=None if temp is None else float(temp),
            power_w=None if power is None else power / 1000.0,
            power_limit_w=dev.power_limit,
            sm_clock_mhz=None if sm is None else int(sm),
            mem_clock_mhz=None if memclk is None else int(memclk),
            pcie_rx_bytes_per_s=rx,
            pcie_tx_bytes_per_s=tx,
            throttle_reasons=reasons,
            ecc_errors_uncorrected=dev.ecc_count,
            processes=procs,
            unavailable={**(dev.unavailable or {}), **dev.transient} if dev.transient
            else dev.unavailable,
        )

    def _read_pcie(self, dev: _Device, now: float) -> None:
        """PCIe rx/tx in B/s (the driver reports KB/s over a 20 ms window it waits out)."""
        nv, h = self._nvml, dev.handle
        rx = self._read(dev, "pcie", nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_RX_BYTES)
        tx = None
        if rx is not None:
            tx = self._read(
                dev, "pcie", nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_TX_BYTES
            )
        dev.pcie = (None if rx is None else rx * 1024.0, None if tx is None else tx * 1024.0)
        if "pcie" not in dev.transient:
            dev.pcie_every.done(now)

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

    def _reasons_mask(self, h: Any) -> int:
        nv = self._nvml
        fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if fn is not None:
            try:
                return fn(h)
            except Exception as exc:  # an old driver lacks the new call: fall back
                if "FunctionNotFound" not in type(exc).__name__:
                    raise
        return nv.nvmlDeviceGetCurrentClocksThrottleReasons(h)

    def _ecc(self, dev: _Device) -> int | None:
        nv, h = self._nvml, dev.handle
        if dev.ecc_on is None:
            mode = self._read(dev, "ecc", nv.nvmlDeviceGetEccMode, h)
            if mode is None:  # unsupported (kept in unavailable) or transient (asked again)
                return None
            dev.ecc_on = mode[0] == nv.NVML_FEATURE_ENABLED
            if not dev.ecc_on:
                dev.unavailable = {**(dev.unavailable or {}), "ecc": "ECC is disabled on this GPU"}
        if not dev.ecc_on:
            return None
        count = self._read(
            dev, "ecc", nv.nvmlDeviceGetTotalEccErrors,
            h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC,
        )
        return None if count is None else int(count)

    def _processes(self, dev: _Device, now: float) -> tuple[GpuProcess, ...]:
        nv, h = self._nvml, dev.handle
        procs = self._read(dev, "processes", nv.nvmlDeviceGetComputeRunningProcesses, h)
        if procs is None:  # unsupported, or a transient error: asked again next sample
            return ()
        dev.procs_every.done(now)
        used_by: dict[int, int | None] = {}
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            used = None if used is None or used >= 2**63 else int(used)  # N/A (WDDM, MIG)
            pid = int(p.pid)
            old = used_by.get(pid)  # one pid can appear once per MIG instance: add them up
            if old is not None and used is not None:
                used += old
            used_by[pid] = used
        old_commands, commands = dev.commands, {}
        for pid in used_by:  # a pid's command line does not change: look each one up once
            command = old_commands.get(pid)
            commands[pid] = command_for_pid(pid) if command is None else command
        dev.commands = commands  # pids gone from the GPU are forgotten (pids get reused)
        result = tuple(
            GpuProcess(pid=pid, used_memory_bytes=used_by[pid], command=commands[pid])
            for pid in sorted(used_by)
        )
        if result == dev.last_procs:  # share the tuple between samples: the ring stays small
            return dev.last_procs
        dev.last_procs = result
        return result

    # -- sampling -----------------------------------------------------------------------------
    def sample_once(self) -> list[GpuSample]:
        """Read every watched GPU now, store the samples, call ``on_sample``, return them."""
        self._open()
        now = self._clock()
        pcie = self._pcie_due(now)
        out = [self._sample_device(dev, now, dev.index in pcie) for dev in self._devices]
        with self._lock:
            for s in out:
                self._buffers[s.index].append(s)
        if self.on_sample is not None:
            for s in out:
                try:
                    self.on_sample(s)
                except Exception as exc:  # a full disk must not kill the sampler
                    self.last_error = exc
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

    def cpu_time_s(self) -> float:
        """CPU seconds the current (or last) sampler thread has used, read after each sample."""
        return self._cpu_s

    def _run(self) -> None:
        self._loop(self._stop.wait)

    def _loop(self, wait: Callable[[float], bool]) -> None:
        """Sample on the grid ``start + k * interval`` until ``wait(seconds)`` returns True."""
        ticks = Deadlines(self.interval, self._monotonic())
        while not self._stop.is_set():
            self.sample_once()
            self._cpu_s = time.thread_time()
            pause = ticks.wait_after_tick(self._monotonic())
            self.skipped_ticks = ticks.skipped
            if wait(pause):
                break

    def start(self) -> GpuSampler:
        """Start the daemon thread (does nothing when NVML is unavailable)."""
        if self._thread is not None or not self.available:
            return self
        self._stop.clear()
        self._cpu_s = 0.0
        self._thread = threading.Thread(target=self._run, name="gpudoctor-nvml", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread, wait for the sample in flight, and shut NVML down."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._close()

    def __enter__(self) -> GpuSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
