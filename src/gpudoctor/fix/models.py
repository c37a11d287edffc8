"""The models a training loop trains, and where ``compile`` and ``channels_last`` go for each.

A model is trained by the loop when its parameters build an optimizer the loop steps
(``opt_d = Adam(D.parameters())`` ... ``opt_d.step()``). A loop that steps two optimizers (a GAN: the
generator's and the discriminator's) trains two models, and a change about "the model" is a change
about every one of them: compiling only the discriminator leaves the generator's many small kernels
as they were, and converting only one conv net to channels-last makes the other pay a layout
conversion at every hand-over. So each trained model gets the change, after its own assignment; and
where one optimizer's model is not located (a parameter list, ``itertools.chain(G.parameters(),
F.parameters())``, a model assigned in a branch) the change is advice for all of them: applied to
some models only it is not the fix the finding prescribes.

A file that builds ``torch.nn.Lazy*`` modules gets channels-last as advice: their parameters do
not exist before the first forward, and converting the model raises on them.

``channels_last`` goes on conv nets only (a class of the file or an ``nn.Sequential`` that builds a
convolution; a model built elsewhere: when the file or its project builds convolutions, since the
conversion leaves anything but 4-D tensors alone), and on the plain-name inputs they are called
with in the loop, guarded by ``dim() == 4``.

A model wrapped in ``DistributedDataParallel`` (``model = DDP(model, ...)``, the wrap being the
assignment the loop sees) gets both changes *before* the wrap, on the module it wraps:

- channels-last: DDP builds its gradient buckets and the views of ``gradient_as_bucket_view`` for the
  parameters as they are when it wraps them; converting the parameters afterwards replaces them
  under it;
- compile: PyTorch's "Where to apply torch.compile?" (docs.pytorch.org, compile/programming_model)
  says compile "doesn't handle distributed wrapper modules like DDP or FSDP very well" and shows
  ``model.compile()`` on the inner module, then ``DistributedDataParallel(model)``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from gpudoctor.fix.ops import INSERT_AFTER, INSERT_BEFORE, Op
from gpudoctor.lint.training import DDP


@dataclass(frozen=True)
class Trained:
    """One model the loop trains: its name where assigned, the name the loop calls it by (``None``:
    not known), the assignment the loop sees, and whether it is a conv net (``None``: not known)."""

    name: str
    local: str | None
    assign: ast.stmt
    conv: bool | None = None


def model_of(found, optimizer: str, func) -> tuple[str, ast.AST | None] | None:
    """``(model, its scope)`` for the optimizer named ``optimizer`` (read in ``func``): the name whose
    ``.parameters()`` is the optimizer's first argument, or ``None``."""
    from gpudoctor.fix.locate import origin

    opt, scope = origin(found, optimizer, func)
    outer = None
    for value in found.ctx.assigned(opt, scope):
        if isinstance(value, ast.Call) and value.args:
            first = value.args[0]
            if (isinstance(first, ast.Call) and isinstance(first.func, ast.Attribute)
                    and first.func.attr == "parameters" and isinstance(first.func.value, ast.Name)):
                outer = first.func.value.id
    return (outer, scope) if outer is not None else None


def local_name(found, outer: str, scope) -> str | None:
    """The name the loop's function calls the model ``outer`` (assigned in ``scope``) by."""
    from gpudoctor.fix.locate import origin

    local = [n for n in {outer, *found.ctx.params.get(found.func, ())}
             if origin(found, n, found.func) == (outer, scope)]
    return local[0] if len(local) == 1 else None


def optimizers(found) -> list[str | None]:
    """The optimizers the training loop steps, by name (``None``: not a plain name), in order."""
    from gpudoctor.fix import methods
    from gpudoctor.fix.locate import _scaler_call

    out: list[str | None] = []
    for step in found.steps:
        recv = step.func.value if isinstance(step.func, ast.Attribute) else None
        if _scaler_call(step, "step"):
            recv = step.args[0]
        key = methods.key(recv) if recv is not None else None
        if key not in out:
            out.append(key)
    return out


def trained(found) -> tuple[list[Trained], str]:
    """Every model the loop trains, or ``[]`` and why they were not all located."""
    keys = optimizers(found)
    if len(keys) <= 1:
        if found.model_assign is None:
            return [], f"the assignment of the model ({found.model_outer or 'unknown'}) before the loop was not found"
        return [Trained(found.model_outer or "", found.model, found.model_assign)], ""
    from gpudoctor.fix.locate import dominating_assign, use_in

    out: list[Trained] = []
    for key in keys:
        model = model_of(found, key, found.step_func) if key is not None and "." not in key else None
        if model is None:
            return [], (f"the loop steps {len(keys)} optimizers and the model {key or 'one'} trains was not found "
                        "(built from model.parameters()): a change on some of its models only is not the fix")
        outer, scope = model
        assign = dominating_assign(found, outer, scope, use_in(found, scope))
        if assign is None:
            return [], (f"the loop steps {len(keys)} optimizers and the assignment of {outer} before the loop "
                        "was not found")
        if all(t.name != outer for t in out):
            out.append(Trained(outer, local_name(found, outer, scope), assign, _conv_net(found, outer, scope)))
    return out, ""


def _wrapped(found, assign: ast.stmt) -> str | None:
    """``net`` of ``model = DistributedDataParallel(net, ...)``: the module the wrap takes."""
    value = assign.value if isinstance(assign, ast.Assign) else None
    if isinstance(value, ast.Call) and found.ctx.qualname(value.func) in DDP and value.args:
        inner = value.args[0]
        while isinstance(inner, ast.Attribute):
            inner = inner.value
        if isinstance(inner, ast.Name):
            return ast.unparse(value.args[0])  # ``net``, ``self.model``
    return None


def model_ops(kind: str, found) -> tuple[list[Op], str]:
    """The ``compile`` or ``channels_last`` edits for every model the loop trains."""
    models, reason = trained(found)
    if not models:
        return [], reason
    if kind == "channels_last":
        if not found.conv:
            return [], "no convolution built in this file"
        lazy = next((c for c, _ in found.ctx.calls
                     if (found.ctx.qualname(c.func) or "").startswith("torch.nn.Lazy")), None)
        if lazy is not None:
            return [], (f"{ast.get_source_segment(found.ctx.source, lazy.func)} at line {lazy.lineno} has no "
                        "parameters until the first forward, and .to(memory_format=torch.channels_last) raises "
                        "on them: convert the model after one forward of a dummy batch")
        models = [m for m in models if m.conv is not False]
    ops: list[Op] = []
    for model in models:
        inner = _wrapped(found, model.assign)
        at = found.pos(model.assign)
        name = inner or model.name
        text = (f"{name}.compile()" if kind == "compile"
                else f"{name} = {name}.to(memory_format=torch.channels_last)")
        ops.append(Op(INSERT_BEFORE if inner else INSERT_AFTER, at, at, text=(text,)))
    if kind == "channels_last":
        ops += _input_ops(found, models)
    return ops, ""


def _input_ops(found, models: list[Trained]) -> list[Op]:
    """The 4-D inputs made channels-last: the forward's first input with one model (as located by
    :mod:`gpudoctor.fix.forward`), else every plain-name input of the conv nets in the loop, before
    its first call (not an output of one of them: channels-last already)."""
    def convert(x: str, stmt: ast.stmt) -> Op:
        first = found.pos(stmt)
        return Op(INSERT_BEFORE, first, first, text=(
            f"{x} = {x}.contiguous(memory_format=torch.channels_last) if {x}.dim() == 4 else {x}",))

    if len(optimizers(found)) <= 1:
        if found.forward is not None and found.forward_input is not None:
            return [convert(found.forward_input, found.forward[0])]
        return []
    calls = sorted((n for n in ast.walk(found.loop) if isinstance(n, ast.Call)), key=lambda c: (c.lineno, c.col_offset))
    locals_ = {m.local for m in models if m.local}
    # an output of one of these conv nets (``fake = G(z)``) is channels-last already
    done = {t.id for n in ast.walk(found.loop) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
            and isinstance(n.value.func, ast.Name) and n.value.func.id in locals_ for t in n.targets
            if isinstance(t, ast.Name)}
    ops = []
    for call in calls:
        if not (isinstance(call.func, ast.Name) and call.func.id in locals_ and call.args
                and isinstance(call.args[0], ast.Name)) or call.args[0].id in done:
            continue
        stmt = found.stmt_of(call)
        line = found.lines[stmt.lineno - 1]
        if found.block_of(stmt) is None or len(line) - len(line.lstrip()) != found.pos(stmt)[1]:
            continue  # not a statement of its own line: nowhere to put a line before it
        done.add(call.args[0].id)
        ops.append(convert(call.args[0].id, stmt))
    return ops


def _conv_net(found, name: str, scope) -> bool | None:
    """Whether the model ``name`` builds a convolution: its class in this file (and the classes of
    the file it uses) or its ``nn.Sequential(...)``; ``None`` where its constructor is not here."""
    classes = {n.name: n for n in ast.walk(found.ctx.tree) if isinstance(n, ast.ClassDef)}

    def builds(node: ast.AST, seen: set[str]) -> bool:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and (found.ctx.qualname(sub.func) or "").startswith("torch.nn.Conv"):
                return True
            if isinstance(sub, ast.Name) and sub.id in classes and sub.id not in seen:
                seen.add(sub.id)
                if builds(classes[sub.id], seen):
                    return True
        return False

    known = None
    for value in found.ctx.assigned(name, scope):
        if not isinstance(value, ast.Call):
            continue
        func = value.func
        if isinstance(func, ast.Name) and func.id in classes:
            known = builds(classes[func.id], {func.id}) or bool(known)
        elif found.ctx.qualname(func) == "torch.nn.Sequential":
            known = builds(value, set()) or bool(known)
    return known


__all__ = ["Trained", "local_name", "model_of", "model_ops", "optimizers", "trained"]
