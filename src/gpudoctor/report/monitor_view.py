"""The ``gpudoctor monitor`` view: a row per GPU with bars and a history sparkline, the GPU
processes below, then the host. Pure rendering of records: no NVML, no psutil, no clock.

A metric the device did not give prints as ``n/a`` (``records.units.MISSING``), and the reason is
listed under the table once (NVML cannot give per-process memory under WDDM or some MIG set-ups,
nvitop #55; power on some boards). Clock-event reasons other than ``gpu_idle`` are listed too: a GPU held back by
``sw_power_cap`` or ``hw_thermal_slowdown`` is slower than its utilization says.

The ``nvidia-smi dmon`` readings of seed 000 §3.3 are printed as hints, decided by
:func:`gpudoctor.analysis.monitor_live.live_hints`: low utilization with heavy PCIe rx (waiting on
host-to-device copies), low utilization with a saturated host core (the input pipeline), high
utilization with little PCIe traffic (compute bound), and memory used climbing over minutes
(leak-like). Fan, P-state, encoder/decoder, NVLink and MIG follow nvidia-smi and nvitop; the
encoder/decoder and NVLink columns appear only when some GPU reports them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from gpudoctor.analysis.monitor_live import Hint, counter_rate, live_hints
from gpudoctor.records.gpu import GpuSample, HostSample
from gpudoctor.records.units import MIB, MISSING, gib_number, human_bytes

SPARK = "▁▂▃▄▅▆▇█"
BAR_WIDTH = 8
HISTORY = 12


def bar(fraction: float | None, width: int = BAR_WIDTH) -> str:
    """A text bar ``█████░░░░░`` of ``width`` cells; blank cells when unknown."""
    if fraction is None:
        return "·" * width
    full = round(max(0.0, min(1.0, fraction)) * width)
    return "█" * full + "░" * (width - full)


def sparkline(values: Sequence[float | None], top: float = 100.0) -> str:
    """One character per value, ``▁`` (0) to ``█`` (``top``); a space when unknown."""
    out = []
    for v in values:
        if v is None:
            out.append(" ")
        else:
            level = round(max(0.0, min(1.0, v / top)) * (len(SPARK) - 1))
            out.append(SPARK[level])
    return "".join(out)


def _pct(v: float | None) -> str:
    return MISSING if v is None else f"{v:.0f}%"


def _rate(v: float | None) -> str:
    if v is None:
        return MISSING
    if v >= 1e9:
        return f"{v / 1e9:.1f}G"
    if v >= 1e6:
        return f"{v / 1e6:.0f}M"
    return f"{v / 1e3:.0f}K"


def _gpu_table(latest: Sequence[GpuSample], history: Mapping[int, Sequence[GpuSample]], *,
               bars: int = BAR_WIDTH, spark: bool = True) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True)
    heads = [("GPU", "left"), ("util", "left"), ("memory GiB", "left"), ("power W", "right"),
             ("temp", "right"), ("fan", "right"), ("P", "right"), ("SM MHz", "right"),
             ("PCIe rx/tx", "right")] + ([("history", "left")] if spark else [])
    for head, justify in heads:
        table.add_column(head, justify=justify, no_wrap=True, overflow="ellipsis")
    for s in latest:
        util = None if s.util_gpu_pct is None else s.util_gpu_pct / 100.0
        mem_frac = None
        if s.mem_used_bytes is not None and s.mem_total_bytes:
            mem_frac = s.mem_used_bytes / s.mem_total_bytes
        power = MISSING if s.power_w is None else f"{s.power_w:.0f}"
        if s.power_limit_w is not None:
            power += f"/{s.power_limit_w:.0f}"
        hist = [h.util_gpu_pct for h in history.get(s.index, ())][-HISTORY:]
        cells = [
            f"{s.index} {s.name.removeprefix('NVIDIA ')}",
            f"{bar(util, bars)} {_pct(s.util_gpu_pct):>4}",
            f"{bar(mem_frac, bars)} {gib_number(s.mem_used_bytes)}/"
            f"{gib_number(s.mem_total_bytes, 0)}",
            power,
            MISSING if s.temperature_c is None else f"{s.temperature_c:.0f}°C",
            _pct(s.fan_speed_pct),
            MISSING if s.pstate is None else f"P{s.pstate}",
            MISSING if s.sm_clock_mhz is None else str(s.sm_clock_mhz),
            f"{_rate(s.pcie_rx_bytes_per_s)}/{_rate(s.pcie_tx_bytes_per_s)}",
        ]
        table.add_row(*cells, *([sparkline(hist)] if spark else []))
    return table


class _FittedGpuTable:
    """The GPU table at the terminal's width: the bars shrink, then the history sparkline goes,
    so an 80-column terminal still shows every number whole."""

    def __init__(self, latest: Sequence[GpuSample], history: Mapping[int, Sequence[GpuSample]]):
        self.latest, self.history = latest, history

    def __rich_console__(self, console, options):
        from rich.measure import Measurement

        wide = options.update(width=10_000)  # measure each layout's natural width
        for bars, spark in ((BAR_WIDTH, True), (6, True), (BAR_WIDTH, False), (4, False),
                            (2, False)):
            table = _gpu_table(self.latest, self.history, bars=bars, spark=spark)
            if Measurement.get(console, wide, table).maximum <= options.max_width:
                break
        yield table


def _process_table(latest: Sequence[GpuSample], job_pids: frozenset[int]) -> Table | None:
    rows = [(s.index, p) for s in latest for p in s.processes]
    if not rows:
        return None
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True)
    table.add_column("GPU", justify="right")
    table.add_column("PID", justify="right")
    table.add_column("GPU memory", justify="right")
    table.add_column("SM", justify="right")
    table.add_column("host memory", justify="right")
    if job_pids:
        table.add_column("job")
    table.add_column("command", overflow="ellipsis", no_wrap=True, max_width=60)
    for index, p in sorted(rows, key=lambda r: (r[0], -(r[1].used_memory_bytes or 0), r[1].pid)):
        mem = human_bytes(p.used_memory_bytes, 2)
        cells = [str(index), str(p.pid), mem, _pct(p.sm_util_pct), human_bytes(p.host_rss_bytes, 2)]
        if job_pids:
            cells.append("yes" if p.pid in job_pids else "")
        cells.append(p.command or "(not visible from here)")
        table.add_row(*cells)
    return table


_QUIET = {"mig"}  # "MIG not supported" is the normal case, not a missing reading


def _hint_text(h: Hint) -> str:
    if h.kind == "copies":
        return (f"hint: GPU {h.gpu} is {h.util_pct:.0f}% busy while PCIe rx is "
                f"{h.value / 1e9:.1f} GB/s: it waits on host-to-device copies "
                "(pin_memory=True, non_blocking=True, or keep the data on the GPU)")
    if h.kind == "input":
        return (f"hint: GPU {h.gpu} is {h.util_pct:.0f}% busy while a CPU core is at "
                f"{h.value:.0f}%: the input pipeline may be the bottleneck "
                "(DataLoader num_workers, pin_memory)")
    if h.kind == "compute":
        return (f"hint: GPU {h.gpu} is {h.util_pct:.0f}% busy with PCIe rx+tx at "
                f"{h.value / 1e9:.2f} GB/s: compute bound; speed the model up (bf16 autocast, "
                "torch.compile, channels_last), not the data pipeline")
    t = h.trend
    return (f"hint: GPU {h.gpu} memory used rose {human_bytes(t.growth_bytes)} in the last "
            f"{t.span_s / 60:.0f} min ({t.bytes_per_min / MIB:+.0f} MiB/min, fit r² {t.fit.r2:.2f}) "
            "and is still rising: leak-like (a tensor kept across steps?); "
            "`gpudoctor memory -- CMD` finds it")


def _links_and_codecs(latest: Sequence[GpuSample],
                      history: Mapping[int, Sequence[GpuSample]]) -> list[str]:
    """One line of NVLink rates (GPUs that have NVLink), one of encoder/decoder use (when busy)."""
    links, codecs = [], []
    for s in latest:
        if s.nvlink_rx_bytes is not None:
            recent = list(history.get(s.index, ()))[-64:] or [s]
            links.append(f"GPU {s.index} {_rate(counter_rate(recent, 'nvlink_rx_bytes'))}/"
                         f"{_rate(counter_rate(recent, 'nvlink_tx_bytes'))}")
        if s.encoder_util_pct or s.decoder_util_pct:
            codecs.append(f"GPU {s.index} {_pct(s.encoder_util_pct)}/{_pct(s.decoder_util_pct)}")
    out = []
    if links:
        out.append("NVLink rx/tx B/s: " + ", ".join(links))
    if codecs:
        out.append("video encoder/decoder: " + ", ".join(codecs))
    return out


def _notes(latest: Sequence[GpuSample], host: HostSample | None,
           memory_trails: Mapping[int, Sequence[tuple[float, float]]] | None = None) -> list[str]:
    notes = []
    for s in latest:
        events = [r for r in s.throttle_reasons if r != "gpu_idle"]
        if events:
            notes.append(f"GPU {s.index}: clocks held back by {', '.join(events)}")
        if s.ecc_errors_uncorrected:
            notes.append(f"GPU {s.index}: {s.ecc_errors_uncorrected} uncorrected ECC errors")
        for m in s.mig_devices:
            notes.append(
                f"GPU {s.index} MIG {m.gpu_instance_id}/{m.compute_instance_id} {m.uuid}: "
                f"{gib_number(m.mem_used_bytes)}/{gib_number(m.mem_total_bytes)} GiB")
        by_reason: dict[str, list[str]] = {}
        for metric, reason in sorted((s.unavailable or {}).items()):
            if metric not in _QUIET:
                by_reason.setdefault(reason, []).append(metric)
        if by_reason:
            what = "; ".join(f"{', '.join(m)} ({r})" for r, m in by_reason.items())
            notes.append(f"GPU {s.index} {MISSING}: {what}")
    notes.extend(_hint_text(h) for h in live_hints(latest, host, memory_trails))
    return notes


def _host_line(host: HostSample) -> str:
    parts = [f"host  CPU {_pct(host.cpu_pct)} (busiest core {_pct(host.busiest_core_pct)})"]
    parts.append(f"RAM {gib_number(host.ram_used_bytes)}/{gib_number(host.ram_total_bytes)} GiB")
    if host.tree_pids or host.tree_cpu_pct is not None:
        parts.append(
            f"job: {len(host.tree_pids)} process{'' if len(host.tree_pids) == 1 else 'es'}, "
            f"CPU {_pct(host.tree_cpu_pct)}, "
            f"RSS {gib_number(host.tree_rss_bytes)} GiB"
        )
    return "  ".join(parts)


def render_monitor(
    latest: Sequence[GpuSample],
    history: Mapping[int, Sequence[GpuSample]] | None = None,
    host: HostSample | None = None,
    *,
    gpu_unavailable: str = "",
    job_pids: frozenset[int] | None = None,
    memory_trails: Mapping[int, Sequence[tuple[float, float]]] | None = None,
) -> Group:
    """Build the monitor view.

    Args:
        latest: the newest sample of each GPU, in GPU order.
        history: GPU index -> recent samples (oldest first) for the sparkline.
        host: the newest host sample, if any.
        gpu_unavailable: why there are no GPU samples (printed instead of the GPU table).
        job_pids: pids of the watched job's tree; GPU processes among them are marked.
        memory_trails: GPU index -> (time s, memory used bytes) over the last minutes, for the
            leak-like hint (the monitor keeps one, thinned to a point every few seconds).
    """
    parts: list = []
    if latest:
        parts.append(_FittedGpuTable(latest, history or {}))
        procs = _process_table(latest, job_pids or frozenset())
        parts.append(Text(""))
        if procs is not None:
            parts.append(procs)
        else:
            parts.append(Text("no process holds GPU memory", style="dim"))
    else:
        parts.append(Text(f"no GPU: {gpu_unavailable or 'no samples yet'}", style="yellow"))
    if host is not None:
        parts.append(Text(_host_line(host)))
    for line in _links_and_codecs(latest, history or {}):
        parts.append(Text(line))
    for note in _notes(latest, host, memory_trails):
        parts.append(Text(note, style="yellow" if note.startswith("hint") else "dim"))
    return Group(*parts)


def history_by_gpu(samples: Sequence[GpuSample]) -> tuple[list[GpuSample], dict[int, list[GpuSample]]]:
    """Split a recorded stream into (newest sample per GPU, per-GPU history) for the view."""
    history: dict[int, list[GpuSample]] = {}
    for s in samples:
        history.setdefault(s.index, []).append(s)
    latest = [history[i][-1] for i in sorted(history)]
    return latest, history
