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

from gpudoctor.analysis.breakdown import PARTS
from gpudoctor.analysis.compile_time import compile_line
from gpudoctor.analysis.facts import RunFacts, run_facts
from gpudoctor.analysis.prescription import pct
from gpudoctor.analysis.run_stats import history_note, one_off_note
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Finding, Severity
from gpudoctor.records.rundir import RunData
from gpudoctor.records.units import MISSING, human_bytes
from gpudoctor.report.fit import Verbatim

STYLES = {Severity.INFO: "cyan", Severity.WARN: "yellow", Severity.ERROR: "bold red"}
PART_LABELS = {"data": "data wait", "copy": "copy", "compute": "compute", "comm": "comm",
               "host": "host"}  # column headers; each cell: ms over its share of the step
PART_WORDS = {
    "data": "waiting for the next batch",
    "copy": "copies",
    "comm": "communication",
    "host": "host work while the GPU idles (Python, launches, gaps after syncs)",
}


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
    main = b.largest
    share = pct(b.share(main))
    if main == "compute":
        where = "GPU compute (GPU-bound)" if facts.on_gpu else "compute on the CPU"
        text.append(f"no problem found; {share} of each step is {where}", style="green")
    else:
        text.append(f"no problem found; the largest part of a step is {PART_WORDS[main]} ({share})",
                    style="green")
    return text


def _ms(value: float) -> str:
    if value == 0:
        return "0"
    return f"{value:.3g}" if value >= 0.01 else "<0.01"


def _cell(value_ms: float, step_ms: float) -> str:
    """Two lines, so the table fits 80 columns: milliseconds, then the share of the step."""
    share = value_ms / step_ms if step_ms else 0.0
    return f"{_ms(value_ms)}\n{100 * share:.0f}%"


def breakdown_rows(facts: RunFacts) -> tuple[list[str], list[list[str]]]:
    """(header, one row of single-line cells per rank) of the mean-step breakdown: the HTML
    report's table, the same numbers as :func:`breakdown_table`."""
    unit = facts.ranks[0].stats.throughput[1] if facts.ranks else "samples/s"
    header = ["rank", "step ms", *(PART_LABELS[p] for p in PARTS), "GPU busy", unit]
    rows = []
    for rf in facts.ranks:
        b = rf.breakdown
        rate, rate_unit = rf.stats.throughput
        rows.append([
            str(rf.rank), _ms(b.step_ms),
            *(f"{_ms(b.part(p))} ({100 * b.share(p):.0f}%)" for p in PARTS),
            pct(rf.busy_frac) if facts.on_gpu else MISSING,
            MISSING if rate is None else f"{rate:,.0f}" + ("" if rate_unit == unit else f" {rate_unit}"),
        ])
    return header, rows


def breakdown_table(facts: RunFacts) -> Table:
    """Mean step per rank: what the GPU ran and what the host did while it idled, the GPU
    busy share and the throughput (a mean over the same steps)."""
    used = ", ".join(f"{rf.stats.n_used}/{rf.stats.n_total}" for rf in facts.ranks)
    table = Table(title=f"Mean step: ms and share of the step, steps after warm-up ({used})",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("rank", justify="right", no_wrap=True)
    table.add_column("step", justify="right", no_wrap=True)
    for part in PARTS:
        table.add_column(PART_LABELS[part], justify="right", no_wrap=True)
    table.add_column("GPU busy", justify="right", no_wrap=True)
    unit = facts.ranks[0].stats.throughput[1] if facts.ranks else "samples/s"
    table.add_column(unit, justify="right", no_wrap=True)
    for rf in facts.ranks:
        b = rf.breakdown
        rate, rate_unit = rf.stats.throughput
        table.add_row(
            str(rf.rank), _ms(b.step_ms),
            *(_cell(b.part(p), b.step_ms) for p in PARTS),
            pct(rf.busy_frac) if facts.on_gpu else MISSING,
            MISSING if rate is None else f"{rate:,.0f}" + ("" if rate_unit == unit else f" {rate_unit}"),
        )
    return table


def short_kernel_name(name: str, width: int = 44) -> str:
    """A CUDA kernel's name without its template arguments and parameter list, cut to ``width``
    (``void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)`` ->
    ``at::native::vectorized_elementwise_kernel``)."""
    out, depth = [], 0
    for ch in name.removeprefix("void "):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    short = "".join(out).strip() or name
    return short if len(short) <= width else short[: width - 1] + "…"


def top_rows(facts: RunFacts, n: int) -> tuple[list[tuple[str, str, str, str]], list[tuple[str, str, str]]]:
    """The profiler window's top GPU kernels (name, calls/step, ms/step, share of GPU busy time)
    and top CPU ops by self time (name, calls/step, ms/step) of the first rank with a window,
    per step of the window; shared by the terminal and the HTML report."""
    rf = next((r for r in facts.ranks if r.window is not None and r.window.top_kernels), None)
    if rf is None or n <= 0:
        return [], []
    w, steps = rf.window, rf.window_steps
    busy = w.gpu_busy_ms
    kernels = [(short_kernel_name(k.name), f"{k.count / steps:.3g}", f"{k.total_us / 1000 / steps:.3g}",
                pct(k.total_us / 1000 / busy) if busy else MISSING) for k in w.top_kernels[:n]]
    ops = [(short_kernel_name(o.name), f"{o.count / steps:.3g}", f"{o.total_us / 1000 / steps:.3g}")
           for o in w.top_ops[:n]]
    return kernels, ops


def top_tables(facts: RunFacts, n: int) -> list[RenderableType]:
    """``--top N``: the window's top kernels and CPU ops, the seeds' profiler table."""
    kernels, ops = top_rows(facts, n)
    out: list[RenderableType] = []
    if kernels:
        table = Table(title="Top GPU kernels (profiler window, per step)", title_justify="left",
                      box=box.SIMPLE_HEAD, pad_edge=False)
        for name, justify in (("kernel", "left"), ("calls", "right"), ("ms", "right"), ("of busy", "right")):
            table.add_column(name, justify=justify, overflow="fold")
        for row in kernels:
            table.add_row(*row)
        out.append(table)
    if ops:
        table = Table(title="Top CPU ops by self time (profiler window, per step)", title_justify="left",
                      box=box.SIMPLE_HEAD, pad_edge=False)
        for name, justify in (("op", "left"), ("calls", "right"), ("ms", "right")):
            table.add_column(name, justify=justify, overflow="fold")
        for row in ops:
            table.add_row(*row)
        out.append(table)
    return out


def breakdown_notes(facts: RunFacts) -> list[Text]:
    """Lines under the table: how the parts were split, who waits for whom, each rank's compile
    time (:func:`gpudoctor.analysis.compile_time.compile_line`), and its
    one-off slow step and steps with allocation history on left out of the figures
    (:func:`gpudoctor.analysis.run_stats.one_off_note`, :func:`~gpudoctor.analysis.run_stats.history_note`)."""
    if not facts.ranks:
        return []
    notes = []
    if any(rf.breakdown.gpu_timeline for rf in facts.ranks):
        notes.append("compute/copy/comm: what the GPU ran (profiler window); data wait, host: "
                     "what the host did while the GPU idled")
    elif facts.on_gpu:
        notes.append("no GPU timeline (no profiler window): compute is the rest of the host's step")
    waits = {rf.rank: rf.breakdown.comm_ms for rf in facts.ranks}
    if len(waits) > 1:
        slow = min(waits, key=waits.get)
        waiting = [r for r, w in waits.items() if r != slow and w - waits[slow] >= 0.1 * facts.ranks[0].stats.step_ms]
        if waiting:
            notes.append(f"rank(s) {', '.join(map(str, waiting))}: comm is mostly waiting for "
                         f"rank {slow} in collectives")
    out = [Text(n, style="dim") for n in notes]
    for rf in facts.ranks:  # compilation: start-up work, its own line (recompiles: a finding)
        if rf.compile is not None:
            out.append(Text(compile_line(rf.compile), style="dim"))
    for rf in facts.ranks:  # a late start-up cost, reported like the warm-up the title names
        line = one_off_note(rf.stats, rf.config)
        if line:
            out.append(Text(line, style="yellow"))
    for rf in facts.ranks:  # the steps `run` slowed itself to name a leak's sites
        line = history_note(rf.stats)
        if line:
            out.append(Text(line, style="dim"))
    return out


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
        util = MISSING if g.util_mean_pct is None else f"{g.util_mean_pct:.0f}%"
        mem = human_bytes(g.mem_used_peak_bytes)
        if g.mem_total_bytes:
            mem += f" / {human_bytes(g.mem_total_bytes)}"
        power = MISSING if g.power_mean_w is None else f"{g.power_mean_w:.0f} W"
        if g.power_mean_w is not None and g.power_limit_w:
            power += f" / {g.power_limit_w:.0f} W"
        table.add_row(str(g.index), g.name, str(g.samples), util, pct(g.idle_frac), mem, power,
                      ", ".join(g.throttle_reasons) or "-")
    return table


def finding_block(index: int, finding: Finding) -> RenderableType:
    """One finding: severity, code, gain, title, evidence lines and the fix snippet (a
    :class:`~gpudoctor.report.fit.Verbatim`: :func:`~gpudoctor.report.fit.print_whole` prints it
    unwrapped, so its code copies whole)."""
    text = Text()
    text.append(f"{index}. ", style="bold")
    text.append(f"{finding.severity.value.upper():5}", style=STYLES[finding.severity])
    text.append(f" {finding.code}", style="bold")
    if finding.expected_gain is not None:
        text.append(f"  expected gain {pct(finding.expected_gain)} of step time")
    text.append(f"\n   {finding.title}\n")
    for line in finding.evidence:
        text.append(f"   - {line}\n", style="")
    if not finding.fix:
        return text
    text.append("   fix:", style="bold")
    return Group(text, Verbatim("".join(f"     {line}\n" for line in finding.fix.splitlines()), style="green"))


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


def render_findings(run: RunData, findings: list[Finding], *, top: int = 5,
                    thresholds: Thresholds | None = None) -> RenderableType:
    """The terminal summary of ``run`` with its ``findings`` (as ordered by ``diagnose``);
    ``top``: how many of the window's kernels and CPU ops to list (0: none); ``thresholds``: those
    the findings were made with (default: the defaults)."""
    facts = run_facts(run, thresholds or Thresholds())
    parts: list[RenderableType] = [_header(run, facts), verdict_text(facts, findings)]
    if facts.ranks:
        parts.append(breakdown_table(facts))
        parts.extend(breakdown_notes(facts))
        parts.extend(top_tables(facts, top))
    parts.append(gpu_table(facts))
    if findings:
        parts.append(Text(f"Findings ({len(findings)}, most important first)", style="bold"))
        parts.extend(finding_block(i, f) for i, f in enumerate(findings, 1))
    else:
        parts.append(Text("Findings: none", style="green"))
    return Group(*parts)


__all__ = ["breakdown_notes", "breakdown_rows", "breakdown_table", "finding_block", "short_kernel_name", "top_rows",
           "top_tables", "gpu_table", "render_findings", "verdict_text"]

