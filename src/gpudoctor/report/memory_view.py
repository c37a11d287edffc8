"""Rich rendering of a memory estimate."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from gpudoctor.records.memory import MemoryEstimate, OomSnapshot
from gpudoctor.records.units import human_bytes as fmt_bytes


def render_estimate(est: MemoryEstimate):
    """A table of the estimate's parts and, for GPU estimates, the measured probe points."""
    title = (
        f"Memory estimate: {est.model} at batch {est.batch_size} "
        f"({est.precision}, {est.optimizer}, on {est.device})"
    )
    parts = Table(title=title, title_justify="left", show_header=True)
    parts.add_column("part")
    parts.add_column("bytes", justify="right")
    parts.add_column("how it is known")
    parts.add_row("parameters", fmt_bytes(est.params_bytes), f"{est.param_count:,} parameters")
    parts.add_row("gradients", fmt_bytes(est.grads_bytes), "one per trainable parameter")
    parts.add_row("optimizer state", fmt_bytes(est.optimizer_state_bytes), est.optimizer)
    parts.add_row("activations per sample", fmt_bytes(est.activation_bytes_per_sample),
                  "measured" if est.method == "measured-peaks" else "saved tensors of a forward pass")
    parts.add_row("batch-independent peak", fmt_bytes(est.fixed_bytes),
                  "measured" if est.method == "measured-peaks" else "sum of the above + fixed saved")
    parts.add_row(Text("estimated peak", style="bold"), Text(fmt_bytes(est.peak_bytes), style="bold"),
                  f"at batch {est.batch_size}")
    items: list = [parts]
    if est.points:
        probes = Table(title="Probe steps", title_justify="left")
        probes.add_column("batch", justify="right")
        probes.add_column("peak allocated", justify="right")
        for p in est.points:
            probes.add_row(str(p.batch_size), fmt_bytes(p.peak_allocated_bytes))
        items.append(probes)
    if est.capacity_bytes is not None:
        fit = "none fits" if est.max_batch_size is None else f"{est.max_batch_size}"
        share = est.peak_bytes / est.capacity_bytes
        items.append(Text(
            f"Device memory {fmt_bytes(est.capacity_bytes)}: the estimate uses {share:.0%}; "
            f"largest batch that fits with a {est.margin:.0%} margin: {fit}."
        ))
    else:
        items.append(Text(
            "Estimated on the CPU from saved activations: cuDNN/cuBLAS workspaces and allocator "
            "rounding are not included; run on the GPU for a measured estimate."
        ))
    return Group(*items)


# ---- gpudoctor memory run ----------------------------------------------------------------------

VIEWER_HELP = (
    "open it in PyTorch's memory viewer: drag the file onto pytorch.org/memory_viz, or\n"
    "  python -m torch.cuda._memory_viz trace_plot {path} -o {path}.html"
)


def _signed(n: int) -> str:
    return ("+" if n > 0 else "") + fmt_bytes(n) if n else "0 B"


def stage_cells(row) -> tuple[str, ...]:
    """One row of the stage table as text: step, stage, allocated, change, reserved, peak, what
    it holds (the terminal table and the HTML report show the same cells)."""
    from gpudoctor.analysis.memory_stages import what_it_holds

    return ("-" if row.stage == "model" else str(row.step), row.stage, fmt_bytes(row.allocated_bytes),
            _signed(row.delta_bytes), fmt_bytes(row.reserved_bytes), fmt_bytes(row.peak_allocated_bytes),
            what_it_holds(row.stage, row.step))


def _part(n: int | None) -> str:
    return "not seen" if n is None else fmt_bytes(n)


def render_memory_run(report, run_dir: str = ""):
    """The stage table, the parts, the per-step curve, fit, findings and the OOM sites."""
    from gpudoctor.report.findings_view import finding_block

    items: list = []
    if report.rows:
        stages = Table(title=f"Memory by stage (rank {report.rank}, peak = since the previous stage)",
                       title_justify="left")
        for name, justify in (("step", "right"), ("stage", "left"), ("allocated", "right"),
                              ("change", "right"), ("reserved", "right"), ("peak", "right"),
                              ("what it holds", "left")):
            stages.add_column(name, justify=justify)
        for r in report.rows:
            stages.add_row(*stage_cells(r))
        items.append(stages)
    p = report.parts
    if p is not None:
        parts = Table(title="Where the bytes go", title_justify="left")
        parts.add_column("part")
        parts.add_column("bytes", justify="right")
        parts.add_column("how")
        parts.add_row("model (before any batch)", _part(p.model_bytes), "allocated at the first batch")
        parts.add_row("batch", _part(p.batch_bytes), "batch - model, step 0")
        parts.add_row("activations", _part(p.activation_bytes), "forward - batch (+ zero_grad frees), last step")
        if p.loss_bytes is not None:
            parts.add_row("loss (after the forward)", _part(p.loss_bytes), "loss - forward, last step")
        parts.add_row("gradients", _part(p.gradient_bytes), "backward - batch (+ zero_grad frees), last step")
        parts.add_row("backward peak", _part(p.backward_peak_bytes), "peak between forward and backward, step 0")
        parts.add_row("optimizer state", _part(p.optimizer_first_bytes), "optimizer - backward, step 0")
        parts.add_row("optimizer, later steps", _part(p.optimizer_later_bytes), "optimizer - backward, last probed step")
        parts.add_row(Text("peak", style="bold"), Text(_part(p.peak_bytes), style="bold"), "highest stage peak")
        items.append(parts)
    if report.modules is not None:
        from gpudoctor.report.memory_modules_view import render_module_table

        items.append(render_module_table(report.modules))
    if report.curve:
        curve = Table(title="Per step (allocator at the end of each step)", title_justify="left")
        for name in ("step", "allocated", "reserved", "peak"):
            curve.add_column(name, justify="right")
        points = report.curve
        if len(points) > 12:  # keep the table short: evenly spaced steps, the last one included
            stride = (len(points) - 1) / 11
            points = tuple(points[round(i * stride)] for i in range(12))
        for c in points:
            curve.add_row(str(c.step), fmt_bytes(c.allocated_bytes), fmt_bytes(c.reserved_bytes),
                          fmt_bytes(c.peak_allocated_bytes))
        items.append(curve)
    f = report.fragmentation
    if f is not None:
        line = (f"Fragmentation: reserved - allocated {fmt_bytes(f.cached_free_bytes)}, inactive split "
                f"blocks {fmt_bytes(f.inactive_split_bytes)}, allocation retries {f.alloc_retries}")
        items.append(Text(line + (f"; try: {f.advice}" if f.advice else ".")))
    if report.fit is not None:
        fit = report.fit
        most = "none fits" if fit.max_batch_size is None else str(fit.max_batch_size)
        items.append(Text(
            f"Headroom: {fmt_bytes(fit.headroom_bytes)} of {fmt_bytes(fit.capacity_bytes)} free at the peak. "
            f"At batch {fit.batch_size}: {fmt_bytes(fit.activation_bytes_per_sample)} of activations per "
            f"sample, {fmt_bytes(fit.fixed_bytes)} batch-independent; largest batch that fits with a "
            f"{fit.margin:.0%} margin (linear extrapolation): {most}."
        ))
    if report.oom_sites:
        items.append(_sites_table(report.oom_sites))
    for i, finding in enumerate(report.findings, 1):
        items.append(finding_block(i, finding))
    if not report.findings and report.on_gpu:
        items.append(Text("No leak, fragmentation or out-of-memory finding."))
    if report.oom_pickle:
        items.append(_viewer_text(report.oom_pickle))
    for note in report.notes:
        items.append(Text(f"note: {note}"))
    if run_dir:
        items.append(Text(f"run directory: {run_dir}"))
    return Group(*items)


def _viewer_text(pickle_path: str) -> Text:
    return Text(f"Allocator snapshot: {pickle_path}\n" + VIEWER_HELP.format(path=pickle_path))


def _sites_table(oom_sites) -> Table:
    sites = Table(title="Live at the out-of-memory error, by allocation site", title_justify="left")
    sites.add_column("bytes", justify="right")
    sites.add_column("share", justify="right")
    sites.add_column("blocks", justify="right")
    sites.add_column("site (innermost Python frame)")
    for s in oom_sites:
        sites.add_row(fmt_bytes(s.bytes), f"{s.share:.0%}", str(s.blocks), s.site)
    return sites


# ---- gpudoctor memory show ---------------------------------------------------------------------

NO_STACKS = (
    "No allocation stacks were recorded at this error, so the sites are unknown. The engine records "
    "them after a first recovered OOM (a repeat OOM has them) or from the start with "
    "robust.oom_snapshot = \"always\"; for any script, gpudoctor memory run -- python train.py records them."
)


def render_oom_snapshot(snap: OomSnapshot, sites, findings, *, source: str = "", pickle_path: str = ""):
    """One OOM snapshot file: the allocator's figures, the top sites, the verdict with its ranked
    fixes, and how to open the full snapshot in PyTorch's viewer.

    Args:
        snap: the snapshot (``oom.json`` / ``oom-rank{N}.json``).
        sites: ``analysis.oom.top_sites(snap)``; findings: ``analysis.oom.explain_oom(snap)``.
        source: the file, for the title; pickle_path: the full snapshot, ``""`` when none was written.
    """
    from gpudoctor.analysis.oom import UNKNOWN_SITE
    from gpudoctor.report.findings_view import finding_block

    where = f" at step {snap.step}" if snap.step is not None else ""
    title = f"Out of memory on GPU {snap.device}{where}" + (f": {source}" if source else "")
    figures = Table(title=title, title_justify="left")
    figures.add_column("allocator at the error")
    figures.add_column("bytes", justify="right")
    cached = max(snap.reserved_bytes - snap.allocated_bytes, 0)
    figures.add_row("tried to allocate", fmt_bytes(snap.requested_bytes))
    figures.add_row("allocated by tensors", fmt_bytes(snap.allocated_bytes))
    figures.add_row("reserved by PyTorch", fmt_bytes(snap.reserved_bytes))
    figures.add_row("reserved - allocated (cached, unused)", fmt_bytes(cached))
    figures.add_row("free on the device", f"{fmt_bytes(snap.device_free_bytes)} of {fmt_bytes(snap.device_total_bytes)}")
    figures.add_row("inactive split blocks", fmt_bytes(snap.inactive_split_bytes))
    figures.add_row("allocation retries", str(snap.alloc_retries))
    items: list = [figures]
    if sites:
        items.append(_sites_table(sites))
    if not snap.blocks or all(s.site == UNKNOWN_SITE for s in sites):
        items.append(Text(NO_STACKS))
    for i, finding in enumerate(findings, 1):
        items.append(finding_block(i, finding))
    if pickle_path:
        items.append(_viewer_text(pickle_path))
    else:
        items.append(Text("No full snapshot for PyTorch's viewer: allocation history was off at this error."))
    return Group(*items)
