"""The terminal summary of a diagnosed run: verdict, step-time breakdown, GPU summary, findings.

Rendering only: the numbers come from :mod:`gpudoctor.analysis` and every word of evidence and fix
from the rules.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpudoctor.analysis.facts import RunFacts, run_facts
from gpudoctor.analysis.prescription import pct
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Finding, Severity
from gpudoctor.records.rundir import RunData
from gpudoctor.records.units import human_bytes

STYLES = {Severity.INFO: "cyan", Severity.WARN: "yellow", Severity.ERROR: "bold red"}
PARTS = ("data wait", "H2D", "compute", "sync", "comm")


def verdict_text(facts: RunFacts, findings: Sequence[Finding]) -> Text:
    """The bottleneck in plain words: the top WARN/ERROR finding, else where the step goes."""
    serious = [f for f in findings if f.severity is not Severity.INFO]
    if serious:
        top = serious[0]
        text = Text("Verdict: ", style="bold")
        text.append(top.title, style=STYLES[top.severity])
        if top.expected_gain is not None:
            text.append(f"  (expected gain {pct(top.expected_gain)})")
        return text
    text = Text("Verdict: ", style="bold")
    if not facts.ranks:
        text.append("no training step was recorded", style="bold red")
        return text
    b = facts.ranks[0].breakdown
    parts = dict(zip(PARTS, (b.data_wait_ms, b.h2d_ms, b.compute_ms, b.sync_ms, b.comm_ms)))
    main = max(parts, key=parts.get)
    share = pct(parts[main] / b.step_ms if b.step_ms else None)
    if main == "compute":
        where = "compute (GPU-bound)" if facts.on_gpu else "compute on the CPU"
        text.append(f"no problem found; {share} of each step is {where}", style="green")
    else:
        text.append(f"no problem found; the largest part of a step is {main} ({share})",
                    style="green")
    return text


def _cell(value_ms: float, step_ms: float) -> str:
    share = value_ms / step_ms if step_ms else 0.0
    return f"{value_ms:.3g} {100 * share:.0f}%"


def breakdown_table(facts: RunFacts) -> Table:
    """Median step per rank: where the host time goes, throughput and GPU busy share."""
    used = ", ".join(f"{rf.stats.n_used}/{rf.stats.n_total}" for rf in facts.ranks)
    table = Table(title=f"Step time in ms and share: median of the steps after warm-up ({used})",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("rank", justify="right")
    table.add_column("step", justify="right", no_wrap=True)
    for part in PARTS:
        table.add_column(part, justify="right", no_wrap=True)
    table.add_column("GPU busy", justify="right", no_wrap=True)
    table.add_column("samples/s", justify="right", no_wrap=True)
    for rf in facts.ranks:
        b = rf.breakdown
        rate = rf.stats.samples_per_s
        table.add_row(
            str(rf.rank), f"{b.step_ms:.3g}",
            *(_cell(v, b.step_ms) for v in (b.data_wait_ms, b.h2d_ms, b.compute_ms, b.sync_ms,
                                            b.comm_ms)),
            pct(rf.busy_frac) if facts.on_gpu else "-",
            f"{rate:,.0f}" if rate is not None else "n/a",
        )
    return table


def gpu_table(facts: RunFacts) -> Table | Text:
    """NVML samples per GPU: utilisation, memory, power, throttling."""
    if not facts.gpus:
        return Text("GPU samples: none (no NVML, or a CPU-only machine)", style="dim")
    table = Table(title="GPUs (NVML samples)", title_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False)
    for name in ("gpu", "name", "samples", "util mean", "idle", "memory peak", "power mean",
                 "throttle"):
        table.add_column(name, justify="left" if name in ("name", "throttle") else "right")
    for g in facts.gpus:
        util = "n/a" if g.util_mean_pct is None else f"{g.util_mean_pct:.0f}%"
        mem = human_bytes(g.mem_used_peak_bytes)
        if g.mem_total_bytes:
            mem += f" / {human_bytes(g.mem_total_bytes)}"
        power = "n/a" if g.power_mean_w is None else f"{g.power_mean_w:.0f} W"
        if g.power_mean_w is not None and g.power_limit_w:
            power += f" / {g.power_limit_w:.0f} W"
        table.add_row(str(g.index), g.name, str(g.samples), util, pct(g.idle_frac), mem, power,
                      ", ".join(g.throttle_reasons) or "-")
    return table


def finding_block(index: int, finding: Finding) -> Text:
    """One finding: severity, code, gain, title, evidence lines and the fix snippet."""
    text = Text()
    text.append(f"{index}. ", style="bold")
    text.append(f"{finding.severity.value.upper():5}", style=STYLES[finding.severity])
    text.append(f" {finding.code}", style="bold")
    if finding.expected_gain is not None:
        text.append(f"  expected gain {pct(finding.expected_gain)} of step time")
    text.append(f"\n   {finding.title}\n")
    for line in finding.evidence:
        text.append(f"   - {line}\n", style="")
    if finding.fix:
        text.append("   fix:\n", style="bold")
        for line in finding.fix.splitlines():
            text.append(f"     {line}\n", style="green")
    return text


def _header(run: RunData, facts: RunFacts) -> Text:
    m = run.manifest
    text = Text("gpudoctor run: ", style="bold")
    command = list(m.command)
    if command and "/" in command[0]:
        command[0] = command[0].rsplit("/", 1)[1]  # the interpreter's path is noise here
    text.append(" ".join(command) or "(no command)")
    device = "GPU" if facts.on_gpu else "CPU only"
    configs = [c for c in run.configs.values() if c.device_name]
    if configs:
        device = configs[0].device_name
    text.append(f"\nstatus {m.status}, {facts.world_size} rank(s), {device}")
    if m.knobs:
        text.append(f", knobs tried: {', '.join(m.knobs)}")
    return text


def render_findings(run: RunData, findings: list[Finding]) -> RenderableType:
    """The terminal summary of ``run`` with its ``findings`` (as ordered by ``diagnose``)."""
    facts = run_facts(run, Thresholds())
    parts: list[RenderableType] = [_header(run, facts), verdict_text(facts, findings)]
    if facts.ranks:
        parts.append(breakdown_table(facts))
    parts.append(gpu_table(facts))
    if findings:
        parts.append(Text(f"Findings ({len(findings)}, most important first)", style="bold"))
        parts.extend(finding_block(i, f) for i, f in enumerate(findings, 1))
    else:
        parts.append(Text("Findings: none", style="green"))
    return Group(*parts)


__all__ = ["breakdown_table", "finding_block", "gpu_table", "render_findings", "verdict_text"]

