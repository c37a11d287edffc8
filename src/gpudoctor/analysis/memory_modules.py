"""Memory per module's forward, from ``gpudoctor memory run --modules`` (pure).

Each :class:`ModuleMemory` line holds what one module's forward kept (output plus the tensors
autograd saved: the activations it adds until backward) and its peak above what was allocated
when it started. The table ranks the modules below the model by kept bytes, the model's own
line first as the total; a parent's figures include its children's.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudoctor.records.memory import ModuleMemory

TOP = 15  # rows shown below the model's line


@dataclass(frozen=True)
class ModuleRow:
    name: str
    type: str
    depth: int
    calls: int
    kept_bytes: int
    peak_bytes: int
    share: float  # kept / the model's kept (0 when the model kept nothing)


@dataclass(frozen=True)
class ModuleTable:
    step: int
    model: ModuleRow | None
    rows: tuple[ModuleRow, ...]
    modules_seen: int
    leaves_only: bool


def module_table(lines: list[ModuleMemory], *, top: int = TOP, leaves_only: bool = False) -> ModuleTable | None:
    """The model's line and the ``top`` modules by kept bytes (then peak, then call order).

    ``leaves_only``: only modules with no child module measured (no double counting of a block
    and its layers).
    """
    if not lines:
        return None
    step = lines[0].step
    lines = [m for m in lines if m.step == step]
    root = next((m for m in lines if m.depth == 0), None)
    total = root.kept_bytes if root is not None and root.kept_bytes > 0 else 0

    def row(m: ModuleMemory) -> ModuleRow:
        return ModuleRow(name=m.name or "(model)", type=m.type, depth=m.depth, calls=m.calls,
                         kept_bytes=m.kept_bytes, peak_bytes=m.peak_bytes,
                         share=m.kept_bytes / total if total else 0.0)

    below = [m for m in lines if m.depth > 0]
    if leaves_only:
        parents = {m.name.rpartition(".")[0] for m in below}
        below = [m for m in below if m.name not in parents]
    below.sort(key=lambda m: (-m.kept_bytes, -m.peak_bytes, m.order))
    return ModuleTable(step=step, model=row(root) if root is not None else None,
                       rows=tuple(row(m) for m in below[:top]), modules_seen=len(lines),
                       leaves_only=leaves_only)
