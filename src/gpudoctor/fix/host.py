"""Batches sliced from a host tensor (no DataLoader): ``x = data[i:j].to(device)`` every step from
pageable memory. The fix pins the tensor once, where it is made, and makes the copies
non-blocking: a slice of a pinned tensor is pinned (it is a view of the same storage), and the
copy, ordered on the stream, overlaps the host's next work (GD-RUN-H2D-PAGEABLE/-BLOCKING).
"""

from __future__ import annotations

import ast

from gpudoctor.fix.locate import Located, dominating_assign, use_in


def host_slices(found: Located) -> list[tuple[ast.Call, ast.stmt]]:
    """``(copy call, the assignment of the sliced tensor)`` for each ``.to(...)``/``.cuda(...)`` in
    the training loop of ``NAME[...]``, where ``NAME`` is assigned once, from a ``torch.*`` call,
    in a statement that always runs before the loop."""
    if found.loop is None:
        return []
    ctx, out = found.ctx, []
    for node in ast.walk(found.loop):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("to", "cuda")
                and isinstance(node.func.value, ast.Subscript) and isinstance(node.func.value.value, ast.Name)):
            continue
        if any(k.arg in ("non_blocking", None) for k in node.keywords):
            continue
        name = node.func.value.value.id
        values = ctx.assigned(name, found.func)
        if name in found.batch_names or len(values) != 1 or not isinstance(values[0], ast.Call) \
                or not (ctx.qualname(values[0].func) or "").startswith("torch."):
            continue
        scope = found.func
        assign = dominating_assign(found, name, scope, use_in(found, scope))
        if assign is not None and isinstance(assign, ast.Assign):
            out.append((node, assign))
    return out


__all__ = ["host_slices"]
