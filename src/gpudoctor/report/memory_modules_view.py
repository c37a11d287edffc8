"""The per-module forward memory table of ``gpudoctor memory run --modules`` and the
``memory estimate --what-if`` table."""

from __future__ import annotations

from rich.table import Table

from gpudoctor.records.units import human_bytes as fmt_bytes


def render_module_table(table) -> Table:
    """The model's line (the total), then the modules that kept the most, with their peaks."""
    title = (f"Memory by module's forward (step {table.step}, {table.modules_seen} modules; "
             "a parent includes its children)")
    out = Table(title=title, title_justify="left")
    for name, justify in (("module", "left"), ("type", "left"), ("calls", "right"),
                          ("kept", "right"), ("share", "right"), ("peak in forward", "right")):
        out.add_column(name, justify=justify)
    rows = ([table.model] if table.model is not None else []) + list(table.rows)
    for r in rows:
        out.add_row(r.name, r.type, str(r.calls), fmt_bytes(r.kept_bytes),
                    f"{r.share:.0%}" if r.share else "-", fmt_bytes(r.peak_bytes))
    out.caption = ("kept: allocated after the forward minus before (its output and what autograd "
                   "saved for backward); peak: the allocator's peak inside it minus before")
    out.caption_justify = "left"
    return out


def render_what_if(answers) -> Table:
    """One row per ``--what-if``: the part it changes, now and then, and the peak."""
    out = Table(title="What if", title_justify="left")
    out.add_column("change", no_wrap=True)
    for name, justify in (("part", "left"), ("now", "right"), ("then", "right"),
                          ("peak now", "right"), ("peak then", "right")):
        out.add_column(name, justify=justify)
    lines = []
    for a in answers:
        out.add_row(a.change, a.part, fmt_bytes(a.before_bytes), fmt_bytes(a.after_bytes),
                    fmt_bytes(a.peak_before_bytes), fmt_bytes(a.peak_after_bytes))
        lines.append(f"{a.change}: {a.how}" + "".join(f"; {n}" for n in a.notes))
    out.caption = "\n".join(lines)
    out.caption_justify = "left"
    return out
