"""Reading one GPU through NVML into a :class:`~gpudoctor.records.gpu.GpuSample`.

A :class:`Device` caches what one GPU needs between samples: its handle and name, the metrics it
cannot give (kept in ``unavailable`` and never asked again), the errors of this sample only
(``transient``, asked again next time), the decoded clock-event reason masks, the last process
list and the command line of each pid on it, and the metrics read on a slower cadence (PCIe
rx/tx, the enforced power limit, the volatile ECC count) with their :class:`Every` schedules.
:class:`~gpudoctor.collectors.nvml.GpuSampler` opens NVML, decides which GPU's PCIe counters are
due, and keeps the samples.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpudoctor.collectors import nvml_extras as extras
from gpudoctor.collectors.cadence import Every
from gpudoctor.collectors.host import command_for_pid
from gpudoctor.records.gpu import GpuProcess, GpuSample, MigDevice

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


def decode_clock_event_reasons(mask: int) -> tuple[str, ...]:
    """Names of the bits set in an NVML clock-event (throttle) reason mask, lowest bit first."""
    names = [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]
    unknown = mask & ~sum(bit for bit, _ in CLOCK_EVENT_REASONS)
    if unknown:
        names.append(f"other_0x{unknown:x}")
    return tuple(names)


class Device:
    """Everything cached for one GPU: its handle, name, and what it cannot give."""

    __slots__ = (
        "nv", "index", "handle", "name", "unavailable", "transient", "ecc_on", "last_procs",
        "reasons", "commands", "procs_every", "pcie_every", "slow_every", "pcie", "power_limit",
        "ecc_count", "uuid", "pci_bus_id", "extras_every", "fan", "codec", "nvlink", "nvlinks",
        "mig", "util_seen_us", "pstate", "host_procs", "nvlink_sum",
    )

    def __init__(
        self, nv: Any, index: int, handle: Any, name: str, *, procs: Every, pcie: Every, slow: Every,
        extras_every: Every | None = None, uuid: str = "", pci_bus_id: str = "",
    ) -> None:
        self.nv = nv  # the pynvml-like module
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
        self.uuid, self.pci_bus_id = uuid, pci_bus_id
        # fan, encoder/decoder, NVLink counters, MIG devices: read on this cadence (nvml_extras)
        self.extras_every = extras_every if extras_every is not None else Every(procs.interval,
                                                                                procs.slack)
        self.fan: float | None = None
        self.pstate: int | None = None
        self.codec: tuple[float | None, float | None] = (None, None)
        self.nvlink: tuple[int | None, int | None] = (None, None)
        self.nvlinks: int | None = None  # NVLink count, read once
        self.nvlink_sum: bool | None = None  # the driver sums the links itself (None: not asked)
        self.mig: tuple[MigDevice, ...] = ()
        self.util_seen_us = 0  # newest per-process utilisation sample seen (NVML's timestamp)
        self.host_procs: dict[int, Any] = {}  # pid -> psutil.Process (None: not visible here)

    def read(self, metric: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Call ``fn(*args)``; on an NVML error return None and keep the reason for ``metric``."""
        if self.unavailable is not None and metric in self.unavailable:
            return None
        try:
            return fn(*args)
        except Exception as exc:
            kind = type(exc).__name__
            if isinstance(exc, AttributeError):  # an nvidia-ml-py too old for this call
                self.unavailable = {**(self.unavailable or {}),
                                    metric: "not in this nvidia-ml-py (upgrade it)"}
            elif kind in _PERMANENT or any(
                isinstance(exc, getattr(self.nv, k, ())) for k in _PERMANENT
            ):
                reason = "not supported by this GPU or driver" if "NotSupported" in kind else str(exc)
                self.unavailable = {**(self.unavailable or {}), metric: reason}
            else:  # e.g. NVMLError_Unknown, GpuIsLost: say so for this sample, ask again next time
                self.transient[metric] = f"{kind}: {exc}"
            return None

    def sample(self, now: float, *, pcie_now: bool, processes: bool) -> GpuSample:
        """Read the core metrics now, and the slower ones when due (see the module docstring)."""
        nv, h, read = self.nv, self.handle, self.read
        self.transient = {}
        util = read("utilization", nv.nvmlDeviceGetUtilizationRates, h)
        mem = read("memory", nv.nvmlDeviceGetMemoryInfo, h)
        temp = read("temperature", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
        power = read("power", nv.nvmlDeviceGetPowerUsage, h)
        slow = self.slow_every.due(now)  # power limit and ECC count (reads in nvidia-smi order)
        if slow:
            limit = read("power_limit", nv.nvmlDeviceGetEnforcedPowerLimit, h)
            self.power_limit = None if limit is None else limit / 1000.0
        sm = read("sm_clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
        memclk = read("mem_clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM)
        if pcie_now:
            self.read_pcie(now)
        mask = read("clock_event_reasons", self._reasons_mask, h)
        reasons: tuple[str, ...] = ()
        if mask is not None:
            reasons = self.reasons.get(mask) or self.reasons.setdefault(
                mask, decode_clock_event_reasons(int(mask))
            )
        if self.extras_every.due(now):
            self.pstate = extras.pstate(self)
            self.fan = extras.fan_speed(self)
            self.codec = extras.codec_util(self)
            self.nvlink = extras.nvlink_bytes(self)
            self.mig = extras.mig_devices(self)
            self.extras_every.done(now)
        if slow:
            self.ecc_count = self._ecc()
            if "power_limit" not in self.transient and "ecc" not in self.transient:
                self.slow_every.done(now)  # a failed read stays due and is retried next sample
        procs: tuple[GpuProcess, ...] = ()
        if processes:
            procs = self._processes(now) if self.procs_every.due(now) else self.last_procs
        rx, tx = self.pcie
        return GpuSample(
            timestamp_s=now,
            index=self.index,
            name=self.name,
            util_gpu_pct=None if util is None else float(util.gpu),
            util_mem_pct=None if util is None else float(util.memory),
            mem_total_bytes=None if mem is None else int(mem.total),
            mem_used_bytes=None if mem is None else int(mem.used),
            mem_free_bytes=None if mem is None else int(mem.free),
            temperature_c=None if temp is None else float(temp),
            power_w=None if power is None else power / 1000.0,
            power_limit_w=self.power_limit,
            sm_clock_mhz=None if sm is None else int(sm),
            mem_clock_mhz=None if memclk is None else int(memclk),
            pcie_rx_bytes_per_s=rx,
            pcie_tx_bytes_per_s=tx,
            throttle_reasons=reasons,
            ecc_errors_uncorrected=self.ecc_count,
            processes=procs,
            unavailable={**(self.unavailable or {}), **self.transient} if self.transient
            else self.unavailable,
            uuid=self.uuid,
            pci_bus_id=self.pci_bus_id,
            fan_speed_pct=self.fan,
            pstate=self.pstate,
            encoder_util_pct=self.codec[0],
            decoder_util_pct=self.codec[1],
            nvlink_rx_bytes=self.nvlink[0],
            nvlink_tx_bytes=self.nvlink[1],
            mig_devices=self.mig,
        )

    def read_pcie(self, now: float) -> None:
        """PCIe rx/tx in B/s (the driver reports KB/s over a 20 ms window it waits out)."""
        nv, h = self.nv, self.handle
        rx = self.read("pcie", nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_RX_BYTES)
        tx = None
        if rx is not None:
            tx = self.read("pcie", nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_TX_BYTES)
        self.pcie = (None if rx is None else rx * 1024.0, None if tx is None else tx * 1024.0)
        if "pcie" not in self.transient:
            self.pcie_every.done(now)

    def _reasons_mask(self, h: Any) -> int:
        nv = self.nv
        fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if fn is not None:
            try:
                return fn(h)
            except Exception as exc:  # an old driver lacks the new call: fall back
                if "FunctionNotFound" not in type(exc).__name__:
                    raise
        return nv.nvmlDeviceGetCurrentClocksThrottleReasons(h)

    def _ecc(self) -> int | None:
        nv, h = self.nv, self.handle
        if self.ecc_on is None:
            mode = self.read("ecc", nv.nvmlDeviceGetEccMode, h)
            if mode is None:  # unsupported (kept in unavailable) or transient (asked again)
                return None
            self.ecc_on = mode[0] == nv.NVML_FEATURE_ENABLED
            if not self.ecc_on:
                self.unavailable = {**(self.unavailable or {}), "ecc": "ECC is disabled on this GPU"}
        if not self.ecc_on:
            return None
        count = self.read(
            "ecc", nv.nvmlDeviceGetTotalEccErrors,
            h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC,
        )
        return None if count is None else int(count)

    def _processes(self, now: float) -> tuple[GpuProcess, ...]:
        procs = self.read("processes", self.nv.nvmlDeviceGetComputeRunningProcesses, self.handle)
        if procs is None:  # unsupported, or a transient error: asked again next sample
            return ()
        self.procs_every.done(now)
        used_by: dict[int, int | None] = {}
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            used = None if used is None or used >= 2**63 else int(used)  # N/A (WDDM, MIG)
            pid = int(p.pid)
            old = used_by.get(pid)  # one pid can appear once per MIG instance: add them up
            if old is not None and used is not None:
                used += old
            used_by[pid] = used
        old_commands, commands = self.commands, {}
        for pid in used_by:  # a pid's command line does not change: look each one up once
            command = old_commands.get(pid)
            commands[pid] = command_for_pid(pid) if command is None else command
        self.commands = commands  # pids gone from the GPU are forgotten (pids get reused)
        self.host_procs = {pid: h for pid, h in self.host_procs.items() if pid in used_by}
        sm = extras.process_sm_util(self) if used_by else {}
        result = tuple(
            GpuProcess(pid=pid, used_memory_bytes=used_by[pid], command=commands[pid],
                       sm_util_pct=sm.get(pid),
                       host_rss_bytes=extras.host_rss(pid, self.host_procs))
            for pid in sorted(used_by)
        )
        if result == self.last_procs:  # share the tuple between samples: the ring stays small
            return self.last_procs
        self.last_procs = result
        return result


__all__ = ["CLOCK_EVENT_REASONS", "Device", "decode_clock_event_reasons"]
