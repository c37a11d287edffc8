"""Rich rendering of a memory estimate."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from gpudoctor.records.memory import MemoryEstimate
from gpudoctor.analysis.prescription import human_bytes as fmt_bytes


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
