"""``gpudoctor monitor --prometheus PORT``: the newest samples as Prometheus metrics.

GPU metrics carry the names and labels of NVIDIA's DCGM exporter (``etc/default-counters.csv``
of NVIDIA/dcgm-exporter: ``DCGM_FI_DEV_GPU_UTIL``, ``DCGM_FI_DEV_FB_USED`` …, labelled ``gpu``,
``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname``), so a Grafana dashboard built
for dcgm-exporter reads them. Units follow DCGM: memory in MiB, power in W, clocks in MHz,
utilisation in %. What DCGM has no field for is named ``gpudoctor_*`` with its unit in the name:
PCIe rates, NVLink byte counters, clock-event reasons, MIG instance memory, per-process GPU
memory, SM % and host memory (nvitop-exporter's per-process view), and the host.

A reading the GPU did not give is left out of the scrape (Prometheus treats a missing series as
unknown), never exported as 0. :func:`metric_families` is pure (records in, :class:`Family`
out); :class:`SamplesCollector` hands them to ``prometheus_client`` on each scrape, which is
imported only when the exporter starts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpudoctor.records.gpu import GpuSample, HostSample
from gpudoctor.records.units import MIB

Labels = dict[str, str]


@dataclass(frozen=True, slots=True)
class Family:
    """One metric: ``kind`` is ``"gauge"`` or ``"counter"``; ``samples`` are (labels, value)."""

    name: str
    kind: str
    help: str
    samples: list[tuple[Labels, float]] = field(default_factory=list)


def _mib(v: int | None) -> float | None:
    return None if v is None else float(v // MIB)  # whole MiB, as DCGM reports framebuffer


# (DCGM field, help, value of a sample); gauges labelled with the GPU's identity
DCGM_GAUGES: tuple[tuple[str, str, Callable[[GpuSample], float | None]], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda s: s.util_gpu_pct),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", lambda s: s.util_mem_pct),
    ("DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).", lambda s: s.encoder_util_pct),
    ("DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).", lambda s: s.decoder_util_pct),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", lambda s: _mib(s.mem_used_bytes)),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", lambda s: _mib(s.mem_free_bytes)),
    ("DCGM_FI_DEV_FB_TOTAL", "Framebuffer memory total (in MiB).",
     lambda s: _mib(s.mem_total_bytes)),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda s: s.temperature_c),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda s: s.power_w),
    ("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "Enforced power limit (in W).",
     lambda s: s.power_limit_w),
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", lambda s: s.sm_clock_mhz),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", lambda s: s.mem_clock_mhz),
    ("DCGM_FI_DEV_FAN_SPEED", "Fan speed (in % of its maximum).", lambda s: s.fan_speed_pct),
    ("DCGM_FI_DEV_PSTATE", "Performance state (0 = P0, the fastest).", lambda s: s.pstate),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Uncorrected volatile ECC errors since the driver loaded.",
     lambda s: s.ecc_errors_uncorrected),
    ("gpudoctor_pcie_rx_bytes_per_second", "PCIe receive rate (host to GPU), bytes/s.",
     lambda s: s.pcie_rx_bytes_per_s),
    ("gpudoctor_pcie_tx_bytes_per_second", "PCIe transmit rate (GPU to host), bytes/s.",
     lambda s: s.pcie_tx_bytes_per_s),
    ("gpudoctor_sample_timestamp_seconds", "Unix time of the newest sample of this GPU.",
     lambda s: s.timestamp_s),
)
COUNTERS: tuple[tuple[str, str, Callable[[GpuSample], float | None]], ...] = (
    ("gpudoctor_nvlink_rx_bytes", "Data bytes received over every NVLink since the driver loaded.",
     lambda s: s.nvlink_rx_bytes),
    ("gpudoctor_nvlink_tx_bytes", "Data bytes sent over every NVLink since the driver loaded.",
     lambda s: s.nvlink_tx_bytes),
)


def gpu_labels(s: GpuSample, hostname: str) -> Labels:
    """The DCGM exporter's labels of a GPU."""
    return {"gpu": str(s.index), "UUID": s.uuid, "pci_bus_id": s.pci_bus_id,
            "device": f"nvidia{s.index}", "modelName": s.name, "Hostname": hostname}


def _process_name(command: str) -> str:
    first = command.split()[0] if command.split() else ""
    return first.rsplit("/", 1)[-1][:64]


def metric_families(latest: Sequence[GpuSample], host: HostSample | None, *,
                    hostname: str) -> list[Family]:
    """Every metric of one scrape, from the newest sample of each GPU and of the host."""
    out: list[Family] = []
    labelled = [(s, gpu_labels(s, hostname)) for s in latest]
    for name, help_text, value in DCGM_GAUGES:
        fam = Family(name, "gauge", help_text)
        fam.samples.extend((lab, float(v)) for s, lab in labelled if (v := value(s)) is not None)
        out.append(fam)
    for name, help_text, value in COUNTERS:
        fam = Family(name, "counter", help_text)
        fam.samples.extend((lab, float(v)) for s, lab in labelled if (v := value(s)) is not None)
        out.append(fam)
    reasons = Family("gpudoctor_clocks_event_reason", "gauge",
                     "1 while the clocks are held back for this reason (gpu_idle included).")
    mig_used = Family("gpudoctor_mig_fb_used_bytes", "gauge", "Memory used by a MIG instance.")
    mig_total = Family("gpudoctor_mig_fb_total_bytes", "gauge", "Memory of a MIG instance.")
    p_mem = Family("gpudoctor_process_gpu_memory_bytes", "gauge", "GPU memory held by a process.")
    p_sm = Family("gpudoctor_process_sm_util", "gauge",
                  "Share of time a process ran kernels on the GPU's SMs (in %, nvidia-smi pmon).")
    p_rss = Family("gpudoctor_process_host_memory_bytes", "gauge",
                   "Resident host memory of a process on the GPU.")
    for s, lab in labelled:
        reasons.samples.extend(({**lab, "reason": r}, 1.0) for r in s.throttle_reasons)
        for m in s.mig_devices:
            ml = {**lab, "GPU_I_ID": "" if m.gpu_instance_id is None else str(m.gpu_instance_id),
                  "GPU_CI_ID": "" if m.compute_instance_id is None else str(m.compute_instance_id),
                  "MIG_UUID": m.uuid}
            if m.mem_used_bytes is not None:
                mig_used.samples.append((ml, float(m.mem_used_bytes)))
            if m.mem_total_bytes is not None:
                mig_total.samples.append((ml, float(m.mem_total_bytes)))
        for p in s.processes:
            pl = {**lab, "pid": str(p.pid), "process": _process_name(p.command)}
            for fam, v in ((p_mem, p.used_memory_bytes), (p_sm, p.sm_util_pct),
                           (p_rss, p.host_rss_bytes)):
                if v is not None:
                    fam.samples.append((pl, float(v)))
    out += [reasons, mig_used, mig_total, p_mem, p_sm, p_rss]
    out.append(Family("gpudoctor_gpus", "gauge", "GPUs watched.",
                      [({"Hostname": hostname}, float(len(latest)))]))
    if host is not None:
        hl = {"Hostname": hostname}
        for name, help_text, v in (
            ("gpudoctor_host_cpu_percent", "Host CPU use over all cores (in %).", host.cpu_pct),
            ("gpudoctor_host_cpu_busiest_core_percent", "Use of the busiest host core (in %).",
             host.busiest_core_pct),
            ("gpudoctor_host_memory_used_bytes", "Host RAM used.", host.ram_used_bytes),
            ("gpudoctor_host_memory_total_bytes", "Host RAM.", host.ram_total_bytes),
            ("gpudoctor_job_cpu_percent", "CPU use of the --pid job's process tree (in %).",
             host.tree_cpu_pct),
            ("gpudoctor_job_rss_bytes", "Resident memory of the --pid job's process tree.",
             host.tree_rss_bytes),
        ):
            out.append(Family(name, "gauge", help_text, [] if v is None else [(hl, float(v))]))
    return out


class SamplesCollector:
    """A ``prometheus_client`` collector: each scrape calls ``snapshot()`` for the newest samples
    (``(latest GPU samples, host sample)``) and yields :func:`metric_families` of them."""

    def __init__(self, snapshot: Callable[[], tuple[Sequence[GpuSample], HostSample | None]], *,
                 hostname: str) -> None:
        self.snapshot = snapshot
        self.hostname = hostname

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        latest, host = self.snapshot()
        for fam in metric_families(latest, host, hostname=self.hostname):
            if not fam.samples:
                continue
            names = list(fam.samples[0][0])
            cls = CounterMetricFamily if fam.kind == "counter" else GaugeMetricFamily
            metric = cls(fam.name, fam.help, labels=names)
            for labels, value in fam.samples:
                metric.add_metric([labels[n] for n in names], value)
            yield metric


__all__ = ["COUNTERS", "DCGM_GAUGES", "Family", "SamplesCollector", "gpu_labels",
           "metric_families"]
