"""The cost block under the findings (``--price-per-gpu-hour``): what the run costs per 1,000
steps and per epoch, what each finding's wasted time costs, and what a verified ``--try`` fix
saves. Rendering only: the figures come from :mod:`gpudoctor.analysis.cost`."""

from __future__ import annotations

from dataclasses import asdict

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from gpudoctor.analysis.cost import RunCost, TrySavings
from gpudoctor.analysis.prescription import pct


def money(value: float | None) -> str:
    """An amount in the price's currency: thousands separated, 3 significant figures below 1."""
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 1:
        return f"{value:,.2f}"
    return f"{value:#.3g}" if value > 0 else "0"


def _per_epoch(per_epoch: float | None) -> str:
    return f", {money(per_epoch)} per epoch" if per_epoch is not None else ""


def cost_rows(cost: RunCost, savings: TrySavings | None = None,
              unverified: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(what, cost) pairs as display strings; shared by the terminal and the HTML report.
    ``unverified``: the knobs of a ``--try`` that measured no gain above the noise."""
    rows = [("per 1,000 steps", money(cost.per_1k_steps))]
    if cost.per_epoch is not None and cost.steps_per_epoch is not None:
        rows.append((f"per epoch ({cost.steps_per_epoch:,.0f} steps)", money(cost.per_epoch)))
    else:
        rows.append(("per epoch", "unknown: no dataset length and batch size recorded"))
    for f in cost.findings:
        rows.append((f"{f.code} ({pct(f.expected_gain)})",
                     f"wastes {money(f.per_1k_steps)} per 1,000 steps{_per_epoch(f.per_epoch)}"))
    if savings is not None:
        rows.append((f"--try {','.join(savings.knobs)} (-{pct(savings.time_saved_share)}, measured)",
                     f"saves {money(savings.per_1k_steps)} per 1,000 steps{_per_epoch(savings.per_epoch)}"))
    elif unverified:
        rows.append((f"--try {','.join(unverified)}", "saves nothing verified: no gain above the noise"))
    return rows


def cost_heading(cost: RunCost) -> str:
    gpus = f"{cost.gpus} GPU" + ("s" if cost.gpus != 1 else "")
    return (f"Cost at {cost.price_per_gpu_hour:g} per GPU-hour ({gpus}, mean step "
            f"{cost.mean_step_ms:.2f} ms)")


def render_cost(cost: RunCost, savings: TrySavings | None = None,
                unverified: tuple[str, ...] = ()) -> RenderableType:
    """The cost block: a heading and a two-column grid (cells wrap on narrow terminals)."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(overflow="fold")
    grid.add_column(overflow="fold")
    for what, value in cost_rows(cost, savings, unverified):
        grid.add_row(what, value)
    return Group(Text(cost_heading(cost), style="bold"), Padding(grid, (0, 0, 0, 2), expand=False))


def cost_payload(cost: RunCost | None, savings: TrySavings | None = None) -> dict | None:
    """The ``--json`` form: every figure, unrounded."""
    if cost is None:
        return None
    out = asdict(cost)
    out["try_savings"] = asdict(savings) if savings is not None else None
    return out


__all__ = ["cost_heading", "cost_payload", "cost_rows", "money", "render_cost"]
