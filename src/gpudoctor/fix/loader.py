"""The loader change's edits: the planned ``DataLoader`` keywords (from
:func:`~gpudoctor.analysis.knob_map.loader_plan`), each put where the user controls it.

- a keyword absent from the call, or a literal there: set on the call (as ever);
- a keyword read from a command-line option of the script (``num_workers=args.workers``,
  :mod:`gpudoctor.fix.options`): the option's ``default=`` is set instead and the call left alone,
  so ``-j 16`` still means 16 workers; the change carries the option (:class:`OptionEdit`) so a
  command line that sets it itself is measured with the new value;
- an option the script divides by its processes before the loader reads it (imagenet, moco:
  ``args.workers = int((args.workers + ngpus_per_node - 1) / ngpus_per_node)``) is a total: its
  default is the per-process plan times the processes measured on the node (:func:`_as_total`);
- any other expression (a function's parameter filled elsewhere, a config object, a dict entry): set
  on the call, and the comment names what it replaced (``num_workers was cfg.workers``): the patch
  is measured and kept, and the line that no longer reads the user's setting says so;
- while ``num_workers`` stays an expression, ``persistent_workers`` and ``prefetch_factor`` are
  guarded by it (``args.workers > 0``, ``4 if args.workers > 0 else None``): ``DataLoader`` refuses
  both without workers, and ``-j 0`` must still run.
"""

from __future__ import annotations

import ast
import dataclasses
import re

from gpudoctor.analysis.facts import main_loader
from gpudoctor.analysis.knob_map import loader_plan
from gpudoctor.fix.host import host_slices
from gpudoctor.fix.locate import Located
from gpudoctor.fix.ops import INSERT_AFTER, SET_KWARGS, Change, Op, OptionEdit
from gpudoctor.fix.options import divided, long_flags, readers, traced_option
from gpudoctor.lint.flow import parents
from gpudoctor.lint.rules.gd104_dataloader_defaults import LOADERS
from gpudoctor.records.run import RankConfig

def planned(kind: str, config: RankConfig | None, on_gpu: bool) -> tuple[tuple[str, str], ...]:
    """The keywords ``kind`` sets (``(name, value text)``), as ``--try`` and the finding word them."""
    if kind == "pin_memory":
        return (("pin_memory", "True"),)
    plan = loader_plan(main_loader(config), config, on_gpu)
    pairs = [("num_workers", str(plan.workers))] if plan.workers is not None else []
    pairs += [(name, "True") for name in ("pin_memory", "persistent_workers") if getattr(plan, name)]
    pairs += [("prefetch_factor", str(plan.prefetch_factor))] if plan.prefetch_factor is not None else []
    return tuple(pairs)


def loader_ops(kind: str, found: Located, config: RankConfig | None,
               on_gpu: bool) -> tuple[list[Op], str, tuple[OptionEdit, ...]]:
    """The edits of a ``loader`` or ``pin_memory`` change, why none, and the options it sets."""
    call = found.loader_call
    if call is None and kind == "pin_memory":
        ops, reason = host_pin_ops(found)
        return ops, reason, ()
    if call is None:
        return [], "; ".join(n for n in found.notes if "loader" in n.lower()) or "the DataLoader was not located", ()
    pairs = planned(kind, config, on_gpu)
    if not pairs:
        return [], "the loader already has the planned settings", ()
    src, ops, edits = found.ctx.source, [], []
    kw = {k.arg: k.value for k in call.keywords if k.arg is not None}
    on_call: list[tuple[str, str]] = []
    replaced: list[str] = []
    for name, value in pairs:
        current = kw.get(name)
        kept = _keep_workers(found) if name == "num_workers" else ""
        if kept:
            replaced.append(kept)
            continue
        if current is None or isinstance(current, ast.Constant):
            on_call.append((name, value))
            continue
        option = traced_option(found, current, call)
        if option is not None and _numeric(option, value):
            text = ast.get_source_segment(src, current) or name
            value, total = _as_total(found, option, value, config) if name == "num_workers" else (value, "")
            if value is None:
                replaced.append(total)  # a divisor fix cannot count: the default left alone, the reason said
                continue
            # a default that already is the value needs no edit; a command line setting it still does
            if not (isinstance(option.default, ast.Constant) and str(option.default.value) == value):
                ops.append(_default_op(found, option, name, value, text, current, call, total))
                if name == "num_workers":
                    ops += _shared_ops(found, option, value, call)
            edits.append(OptionEdit(flags=option.flags, value=value,
                                    was=ast.get_source_segment(src, option.default) if option.default else "",
                                    longs=long_flags(found.ctx.tree)))
            continue
        on_call.append((name, value))
        replaced.append(f"{name} was {ast.get_source_segment(src, current)}")
    workers = kw.get("num_workers")
    if workers is not None and not isinstance(workers, ast.Constant) and "num_workers" not in dict(on_call):
        on_call = _guarded(on_call, ast.get_source_segment(src, workers) or "", workers)
    elif "num_workers" not in dict(on_call) and not (isinstance(workers, ast.Constant) and workers.value):
        on_call = [(n, v) for n, v in on_call if n not in ("persistent_workers", "prefetch_factor")]  # no workers
    if on_call:
        why = _why(dict(on_call))
        lost = [r for r in replaced if " was " in r]
        kept = [r for r in replaced if " was " not in r]
        if lost:
            why += f" ({'; '.join(lost)}: that setting no longer applies to this loader)"
        if kept:
            why += f" ({'; '.join(kept)})"
        ops.insert(0, Op(SET_KWARGS, found.pos(call), found.pos(found.stmt_of(call)), text=(found.callee(call),),
                         kwargs=tuple(on_call), why=why))
    return ops, "", tuple(edits)


def _keep_workers(found: Located) -> str:
    """Why the script's ``num_workers`` is kept as it is, or ``""``: a dataset opens ``h5py.File`` in
    ``__init__`` (:mod:`gpudoctor.fix.hazards`)."""
    if found.h5py_init:
        return (f"num_workers kept: {found.h5py_init}, one handle that forked workers cannot share; open it "
                "in __getitem__ (once per worker), then raise the workers")
    return ""


def _shared_ops(found: Located, option, value: str, call: ast.Call) -> list[Op]:
    """``persistent_workers`` on every other ``DataLoader(...)`` built beside the training loader (in the
    same function) whose ``num_workers`` reads the option whose default the change raises (a test
    loader sharing ``--threads``, iterated every epoch).

    Without it the patch would make that loader start the new, larger number of workers each time
    it is iterated: on short epochs the extra start-up ate the training loader's gain
    (super_resolution on an H200: +5% kept against +72% for ``--try``, which keeps every loader's
    workers alive). With it they start once; a loader that sets ``persistent_workers`` is left as is."""
    ops, up = [], parents(found.ctx)
    for other in ast.walk(found.ctx.tree):
        if other is call or not isinstance(other, ast.Call) or found.ctx.qualname(other.func) not in LOADERS:
            continue
        if _function(up, other) is not _function(up, call):
            continue  # built elsewhere (a loader made inside validate() lives for one pass): not kept alive
        kw = {k.arg: k.value for k in other.keywords if k.arg is not None}
        workers = kw.get("num_workers")
        if "persistent_workers" in kw or not (isinstance(workers, ast.Attribute) and workers.attr == option.dest
                                              and isinstance(workers.value, ast.Name)):
            continue
        text = ast.get_source_segment(found.ctx.source, workers) or option.dest
        why = (f"this loader's workers kept alive too: {text} (now {value} by default) feeds it, and without "
               "them it would start that many workers each time it is iterated")
        ops.append(Op(SET_KWARGS, found.pos(other), found.pos(found.stmt_of(other)), text=(found.callee(other),),
                      kwargs=(("persistent_workers", f"{text} > 0"),), why=why))
    return ops


def _function(up: dict[int, ast.AST], node: ast.AST) -> ast.AST | None:
    """The function whose body holds ``node`` (None: the module)."""
    node = up.get(id(node))
    while node is not None and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        node = up.get(id(node))
    return node


def _numeric(option, value: str) -> bool:
    """An option that stores one number, whose default can become ``value`` (an integer)."""
    kw = {k.arg: k.value for k in option.call.keywords}
    default = option.default
    plain = default is None or (isinstance(default, ast.Constant) and type(default.value) in (int, float)) \
        or (isinstance(default, ast.Constant) and default.value is None)
    return option.action in (None, "store") and "nargs" not in kw and plain and value.lstrip("-").isdigit()


def _as_total(found: Located, option, value: str, config: RankConfig | None) -> tuple[str | None, str]:
    """The default the option needs for ``value`` workers per process, and what the comment says of it.

    Most scripts hand the option to ``DataLoader`` as it is: the default is ``value``. Some divide it
    first (:func:`~gpudoctor.fix.options.divided`: pytorch/examples imagenet and moco's ``args.workers
    = int((args.workers + ngpus_per_node - 1) / ngpus_per_node)``), so the option is a total over
    the processes of a node (or of the job, for ``world_size``): the default becomes ``value`` times
    the processes the measured run had there (``local_world_size``, else ``world_size``: one node).
    The two cases are told apart by that division in the source; a run of one process (the
    single-process imagenet case, where the division is skipped or divides by 1) keeps ``value``.
    A divisor that counts something else leaves the default alone (``None``), with the reason."""
    cut = divided(found, option)
    if cut is None:
        return value, ""
    line, divisor, counts = cut
    if not counts:
        return None, (f"num_workers kept: line {line} divides {option.dest} by {divisor}, which fix cannot "
                      f"count; set it to {value} workers per process times that")
    world = config.world_size if config is not None else 1
    procs = (config.local_world_size or world) if counts == "node" and config is not None else world
    procs = max(procs or 1, 1)
    where = "per node" if counts == "node" else "for the job"
    said = f"a total {where}: line {line} divides it by {divisor}; "
    if procs == 1:
        return value, said + f"one process measured: with N processes set N x {value}"
    return str(int(value) * procs), said + f"{value} per process x {procs} processes measured"


def _default_op(found: Located, option, name: str, value: str, text: str, read: ast.AST, call: ast.Call,
                total: str = "") -> Op:
    """The option's ``default=`` set to ``value``; the comment says where the loader reads it."""
    flags = "/".join(option.flags)
    was = ast.get_source_segment(found.ctx.source, option.default) if option.default is not None else "none"
    inside = range(call.lineno, (call.end_lineno or call.lineno) + 1)
    lines = [n for n in readers(found, option.dest) if n not in inside]
    also = f"; also read at line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))}" if lines else ""
    short = next((f for f in option.flags if not f.startswith("--")), option.flags[0])
    per = f" ({total})" if total else ""
    head = f"{value} data-loading workers in all" if " processes measured" in total else _why({name: value})
    why = (f"{head}: the default of {flags} (was {was}){per}, read as {name}={text} at line "
           f"{read.lineno}{also}; {short} N still sets it")
    return Op(SET_KWARGS, found.pos(option.call), found.pos(found.stmt_of(option.call)), text=(found.callee(option.call),),
              kwargs=(("default", value), *_help(found, option, was, value)), why=why)


def _help(found: Located, option, was: str, value: str) -> tuple[tuple[str, str], ...]:
    """The option's help, where a plain string quotes the old default once (``"(default: 4)"``), with
    the new one: ``-h`` must not say 4 when it is 8."""
    node = next((k.value for k in option.call.keywords if k.arg == "help"), None)
    text = ast.get_source_segment(found.ctx.source, node) if isinstance(node, ast.Constant) else None
    if not text or not isinstance(node.value, str) or text[:1] not in "'\"":
        return ()
    pattern = re.compile(r"(default\s*[:=]?\s*)" + re.escape(was) + r"(?![\w.])", re.IGNORECASE)
    if len(pattern.findall(text)) != 1:
        return ()
    return (("help", pattern.sub(lambda m: m.group(1) + value, text)),)


def _guarded(pairs: list[tuple[str, str]], workers: str, node: ast.AST) -> list[tuple[str, str]]:
    """``persistent_workers`` and ``prefetch_factor`` made conditional on the script's own workers."""
    simple = isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))
    more = f"{workers if simple else f'({workers})'} > 0"
    out = []
    for name, value in pairs:
        if name == "persistent_workers" and value == "True":
            value = more
        elif name == "prefetch_factor":
            value = f"{value} if {more} else None"
        out.append((name, value))
    return out


def pair_persistent(changes: list[Change]) -> list[Change]:
    """The stall's ``persistent_workers`` guarded by the script's ``num_workers`` expression
    (``cfg.workers > 0``) is ``True`` where the loader change replaces that expression on the same
    call with its planned count (ddim's ``config.data.num_workers`` set to 8): the guard would read
    a setting that no longer applies to the loader."""
    counts = {o.at: dict(o.kwargs)["num_workers"] for c in changes if c.kind == "loader" for o in c.ops
              if o.kind == SET_KWARGS and dict(o.kwargs).get("num_workers", "").isdigit()}
    for i, change in enumerate(changes):
        if change.kind != "persistent":
            continue
        ops = tuple(dataclasses.replace(o, kwargs=tuple((n, "True" if n == "persistent_workers" and
                                                         int(counts[o.at]) > 0 else v) for n, v in o.kwargs))
                    if o.kind == SET_KWARGS and o.at in counts else o for o in change.ops)
        changes[i] = dataclasses.replace(change, ops=ops)
    return changes


def host_pin_ops(found: Located) -> tuple[list[Op], str]:
    """No DataLoader: batches sliced from host tensors get those tensors pinned once, and the copies
    made non-blocking (:mod:`gpudoctor.fix.host`)."""
    slices = host_slices(found)
    if not slices:
        return [], "; ".join(n for n in found.notes if "loader" in n.lower()) or "the DataLoader was not located"
    ops, pinned = [], set()
    for copy, assign in slices:
        name = assign.targets[0].id
        if name not in pinned:
            pinned.add(name)
            at = found.pos(assign)
            ops.append(Op(INSERT_AFTER, at, at, text=(
                f"{name} = {name}.pin_memory() if torch.cuda.is_available() else {name}",)))
        ops.append(Op(SET_KWARGS, found.pos(copy), found.pos(found.stmt_of(copy)), text=(found.callee(copy),), kwargs=(("non_blocking", "True"),),
                      why="copy the batch from pinned memory without blocking the host"))
    return ops, ""


def _why(kwargs: dict[str, str]) -> str:
    """What the loader keywords do, in the words of the values set."""
    parts = [f"{kwargs['num_workers']} worker processes load the batches"] if "num_workers" in kwargs else []
    parts += ["pinned for fast copies"] if "pin_memory" in kwargs else []
    parts += ["kept alive between epochs"] if "persistent_workers" in kwargs else []
    if "prefetch_factor" in kwargs:
        parts += [f"{kwargs['prefetch_factor'].split(' ')[0]} batches ahead per worker"]
    return ", ".join(parts)


__all__ = ["host_pin_ops", "loader_ops", "pair_persistent", "planned"]
