"""The script's own switches: a fix it already implements behind an off-by-default flag.

Engineered training scripts (timm's ``train.py`` and the DeiT, ConvNeXt, MAE, Swin scripts built on
it) carry the fixes ``fix`` would patch behind their own flags: ``--amp`` (with ``--amp-dtype
bfloat16``), ``--channels-last``, ``--torchcompile``, ``--pin-mem``, ``-j/--workers``. Patching
the code again is no fix; turning the flag on is. Such a change is a **command-line change**
(:attr:`~gpudoctor.fix.ops.Change.switches`): the patched run is the unchanged script with the
flag(s) added, measured against the original and kept only if faster, like any change; with
``--no-measure`` it is shown as the command to run.

A flag counts by **what the code it guards does**, never by its name: ``--fast`` guarding
``model.to(memory_format=torch.channels_last)`` is a channels_last switch, and ``--amp`` that only
prints "amp on" is none. An option guards the code

- under an ``if`` (or the true arm of ``a if test else b``) whose test reads it (``not`` in front
  of it: the other way round, not counted);
- of the call it is passed to as a keyword (``autocast(enabled=args.amp)``,
  ``create_loader(pin_memory=args.pin_mem)``: the keyword names what it does);
- of the assignment whose value reads it (``torch.backends.cudnn.benchmark = args.bench``).

What the guarded code does, per change kind (:data:`SIGNS`, a reason per entry). A flag is a switch
when it is ``store_true`` with a false default, or an optional value off by default (``nargs="?"``,
a ``const=`` and no default: timm's ``--torchcompile`` gives ``inductor`` alone). A precision option
(``--amp-dtype``, ``--precision``) is a string option compared with a bf16 spelling
(``args.amp_dtype == "bfloat16"``) where the code that comparison guards names ``bfloat16``, or
whose ``choices`` hold one; it is given that spelling. The loader's worker count is an ``int``
option passed as ``num_workers=`` somewhere; it is raised to the plan's count only where the loop's
own ``DataLoader`` was not located (else :mod:`gpudoctor.fix.loader` sets its default).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.fix.ops import Change, OptionEdit
from gpudoctor.fix.flag_relays import relayed, twins
from gpudoctor.fix.options import Option, long_flags, parser_options, switch

# kind -> (what the guarded code contains, why that is the fix)
SIGNS: dict[str, tuple[str, str]] = {
    "bf16": ("autocast", "autocast over the forward is the mixed-precision fix"),
    "fp16": ("autocast", "autocast (with the script's own scaler) is the fp16 fix"),
    "channels_last": ("channels_last", "memory_format=torch.channels_last on the model and inputs"),
    "compile": ("compile", "torch.compile / module.compile() of the model"),
    "cudnn_benchmark": ("benchmark", "an assignment of cudnn.benchmark"),
    "tf32": ("tf32", "allow_tf32 or set_float32_matmul_precision"),
}
# keyword a flag is passed as -> the kind it implements (the callee decides what the keyword does)
KEYWORDS = {"pin_memory": "pin_memory", "persistent_workers": "persistent", "channels_last": "channels_last"}
BF16 = ("bfloat16", "bf16", "bf16-mixed")


def _does(node: ast.AST) -> set[str]:
    """The signs of :data:`SIGNS` in ``node``."""
    out = set()
    for n in ast.walk(node):
        name = n.attr if isinstance(n, ast.Attribute) else n.id if isinstance(n, ast.Name) else ""
        if name == "autocast":
            out.add("autocast")
        elif name == "channels_last":
            out.add("channels_last")
        elif name in ("allow_tf32", "set_float32_matmul_precision"):
            out.add("tf32")
        if isinstance(n, ast.Call) and (getattr(n.func, "attr", "") == "compile" or getattr(n.func, "id", "") ==
                                        "compile") and ast.unparse(n.func).partition(".")[0] not in ("re", "regex"):
            out.add("compile")
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "benchmark"
                                             and "cudnn" in ast.unparse(t) for t in n.targets):
            out.add("benchmark")
    return out


def _imported(tree: ast.AST) -> frozenset[str]:
    """Names bound by the file's imports: ``torch.channels_last`` reads no option."""
    return frozenset((a.asname or a.name).partition(".")[0] for n in ast.walk(tree)
                     if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names)


def _reads(node: ast.AST, dest: str, modules: frozenset[str] = frozenset(), negated_ok: bool = False) -> bool:
    """``node`` reads ``<name>.<dest>`` of a name no import binds (not under ``not``, unless
    ``negated_ok``)."""
    hidden = set() if negated_ok else {id(x) for n in ast.walk(node) if isinstance(n, ast.UnaryOp)
                                       and isinstance(n.op, ast.Not) for x in ast.walk(n.operand)}
    return any(isinstance(n, ast.Attribute) and n.attr == dest and isinstance(n.value, ast.Name)
               and n.value.id not in modules and id(n) not in hidden for n in ast.walk(node))


def guarded(tree: ast.AST, dest: str) -> Iterator[tuple[ast.AST, str]]:
    """``(code, keyword)`` for each piece of code the option ``dest`` turns on (``keyword``: the
    keyword it is passed as, ``""`` for an ``if``/``IfExp`` body or an assignment)."""
    modules = _imported(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _reads(node.test, dest, modules):
            yield ast.Module(body=node.body, type_ignores=[]), ""
        elif isinstance(node, ast.IfExp) and _reads(node.test, dest, modules):
            yield node.body, ""
        elif isinstance(node, ast.Call):
            for k in node.keywords:
                if k.arg and _reads(k.value, dest, modules):
                    yield node, k.arg
        elif isinstance(node, ast.Assign) and _reads(node.value, dest, modules):
            yield node, ""


def _set_defaults(tree: ast.AST) -> dict[str, ast.AST]:
    """``parser.set_defaults(pin_mem=True)``: the defaults it sets (they win over ``default=``)."""
    return {k.arg: k.value for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == "set_defaults" for k in n.keywords if k.arg}


def _bool_typed(option: Option) -> bool:
    """``type=str2bool`` (ConvNeXt's ``--use_amp true``): a value parsed as a boolean."""
    kind = next((k.value for k in option.call.keywords if k.arg == "type"), None)
    return isinstance(kind, ast.Name) and "bool" in kind.id.lower()


def _off(option: Option, defaults: dict[str, ast.AST] | None = None) -> bool:
    """A flag off by default: ``store_true`` with a false default (``set_defaults`` included), a
    boolean-typed option defaulting false, or ``nargs="?"`` with a ``const=`` and no default (the
    flag alone turns it on)."""
    default = (defaults or {}).get(option.dest, option.default)
    falsy = default is None or (isinstance(default, ast.Constant) and not default.value)
    if option.action == "store_true" or (option.action is None and _bool_typed(option)):
        return falsy
    kw = {k.arg: k.value for k in option.call.keywords}
    nargs = kw.get("nargs")
    return (option.action is None and isinstance(nargs, ast.Constant) and nargs.value == "?"
            and "const" in kw and falsy)


def _flag(option: Option) -> str:
    return next((f for f in option.flags if f.startswith("--")), option.flags[0])


def _callee_signs(call: ast.Call, param: str, trees: list[ast.AST]) -> set[str]:
    """What the function ``call`` calls does under its parameter ``param`` (ConvNeXt's
    ``train_one_epoch(..., use_amp=args.use_amp)`` and ``if use_amp: with torch.cuda.amp.autocast():``
    in engine.py): the function of that name, with that parameter, in the file or a module of the
    project it imports; ``if``/``IfExp`` tests reading the bare name, and keywords passed it."""
    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
    out: set[str] = set()
    for tree in trees:
        for func in ast.walk(tree):
            if not (isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) and func.name == name
                    and param in {a.arg for a in func.args.args + func.args.kwonlyargs}):
                continue
            for node in ast.walk(func):
                reads = lambda t: any(isinstance(n, ast.Name) and n.id == param for n in ast.walk(t))  # noqa: E731
                if isinstance(node, ast.If) and reads(node.test) and not isinstance(node.test, ast.UnaryOp):
                    out |= _does(ast.Module(body=node.body, type_ignores=[]))
                elif isinstance(node, ast.Call) and any(k.arg == "enabled" and reads(k.value) for k in node.keywords):
                    out |= _does(node)
    return out


def _script(found) -> tuple[ast.AST, list[ast.AST]]:
    """The script's tree (its parser and flags: the script's, even where the loop was located in a
    module of its project) and the trees of the project modules it imports."""
    from pathlib import Path

    from gpudoctor.fix.project import local_modules

    tree, path = found.ctx.tree, Path(getattr(found.ctx, "path", "") or "")
    if found.file and found.script:
        try:
            path = Path(found.script)
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            return found.ctx.tree, []
    if not path.is_file():
        return tree, []
    trees = []
    for module, _ in local_modules(path, tree):
        try:
            trees.append(ast.parse(module.read_text(encoding="utf-8")))
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue
    return tree, trees


def _kinds_of(tree: ast.AST, option: Option, modules: list[ast.AST] | None = None) -> set[str]:
    """The change kinds the code ``option`` guards implements (directly, or through the constants
    that code assigns: :func:`~gpudoctor.fix.flag_relays.relayed`)."""
    out = set()
    for code, keyword in guarded(tree, option.dest):
        if not keyword:
            out |= {kind for code_on in relayed(tree, code) for kind, (sign, _) in SIGNS.items()
                    if sign in _does(code_on)}
        if keyword in KEYWORDS:
            out.add(KEYWORDS[keyword])
            continue
        signs = _does(code)
        if keyword and keyword != "enabled" and isinstance(code, ast.Call) and modules is not None:
            signs = _callee_signs(code, keyword, [tree, *modules])
        if keyword == "enabled" and "autocast" not in signs:
            continue
        out |= {kind for kind, (sign, _) in SIGNS.items() if sign in signs}
    return out


def _bf16_option(tree: ast.AST, options: dict[str, Option | None]) -> tuple[Option, str] | None:
    """The precision option and its bf16 spelling (timm's ``--amp-dtype bfloat16``), or ``None``."""
    for option in options.values():
        if option is None or option.action is not None:
            continue
        kw = {k.arg: k.value for k in option.call.keywords}
        default = kw.get("default")
        if isinstance(default, ast.Constant) and default.value in BF16:
            continue  # bf16 by default already
        choices = kw.get("choices")
        spelled = [e.value for e in getattr(choices, "elts", []) if isinstance(e, ast.Constant) and e.value in BF16]
        for node in ast.walk(tree):
            compares = [c for c in ast.walk(node.test) if isinstance(c, ast.Compare)] \
                if isinstance(node, (ast.If, ast.IfExp)) else []
            if any(_reads(c, option.dest, _imported(tree)) for c in compares):  # `args.amp and args.amp_dtype == ...`
                lits = [x.value for c in compares for x in ast.walk(c) if isinstance(x, ast.Constant) and x.value in BF16]
                body = node.body if isinstance(node, ast.If) else [node.body]
                if lits and any("bfloat16" in ast.unparse(s) for s in body):
                    return option, lits[0]
        if spelled and any(w in option.dest for w in ("dtype", "precision")):
            return option, spelled[0]
    return None


def _workers_option(tree: ast.AST, options: dict[str, Option | None]) -> Option | None:
    """An ``int`` option passed as ``num_workers=<name>.<dest>`` somewhere in the file."""
    for node in ast.walk(tree):
        for k in node.keywords if isinstance(node, ast.Call) else ():
            if k.arg == "num_workers" and isinstance(k.value, ast.Attribute):
                option = options.get(k.value.attr)
                if option is not None and option.action is None and isinstance(option.default, ast.Constant) \
                        and isinstance(option.default.value, int):
                    return option
    return None


def switch_edits(found, kind: str, loader=None) -> tuple[OptionEdit, ...]:
    """The options to give for ``kind`` (``value`` ``""``: a bare flag), or ``()`` where the script
    has no switch for it. ``loader``: the plan's :class:`~gpudoctor.analysis.knob_map.LoaderPlan`."""
    tree, modules = _script(found)
    options = twins(tree, parser_options(tree))
    longs = long_flags(tree)
    if kind == "loader" and loader is not None:
        return _loader_edits(tree, options, longs, loader)
    want = {"pin_memory": "pin_memory", "persistent": "persistent"}.get(kind, kind)
    defaults = _set_defaults(tree)
    flags = [o for o in options.values() if o is not None and _off(o, defaults) and want in _kinds_of(tree, o, modules)]
    precision = _bf16_option(tree, options) if kind == "bf16" else None
    if not flags and precision is not None and any(SIGNS["bf16"][0] in _does(c) or k == "enabled"
                                                   for c, k in guarded(tree, precision[0].dest)):
        flags = []  # the precision option turns autocast on by itself (``enabled=args.precision != "fp32"``)
    elif not flags:
        return ()
    edits = [OptionEdit(flags=o.flags, value="true" if _bool_typed(o) else "", longs=longs) for o in flags[:1]]
    if precision is not None:
        edits.append(OptionEdit(flags=precision[0].flags, value=precision[1], longs=longs,
                                was=ast.unparse(precision[0].default) if precision[0].default is not None else ""))
    return tuple(edits)


def _loader_edits(tree, options, longs, plan) -> tuple[OptionEdit, ...]:
    edits = []
    workers = _workers_option(tree, options)
    if workers is not None and plan.workers and workers.default.value < plan.workers:
        edits.append(OptionEdit(flags=workers.flags, value=str(plan.workers), was=str(workers.default.value),
                                longs=longs))
    for kind, wanted in (("pin_memory", plan.pin_memory), ("persistent", plan.persistent_workers)):
        defaults = _set_defaults(tree)
        flag = next((o for o in options.values() if o is not None and _off(o, defaults) and kind in _kinds_of(tree, o)),
                    None)
        if wanted and flag is not None:
            edits.append(OptionEdit(flags=flag.flags, value="true" if _bool_typed(flag) else "", longs=longs))
    return tuple(edits)


def switch_change(kind: str, finding, found, why: str, loader=None) -> Change | None:
    """The command-line change for ``kind`` where the script has a switch for it, else ``None``.
    The loader's switches are used only where the loop's ``DataLoader`` was not located."""
    if kind in ("non_blocking", "item", "set_epoch"):
        return None  # no script flag implements these in the scripts read so far: code changes
    if kind in ("loader", "pin_memory", "persistent") and found.loader_call is not None:
        return None
    edits = switch_edits(found, kind, loader)
    if not edits:
        return None
    words = " ".join(e.flags[0] if not e.value else f"{e.flags[-1]} {e.value}" for e in edits)
    if kind == "loader":  # the loader's flags set only part of the code change
        why = f"the loader's workers and memory through the script's own {words}"
    elif kind == "bf16" and len(edits) == 1 and not edits[0].value.lower().startswith("bf"):
        why = f"precision: the script's own mixed precision, {words} (autocast in the dtype the script sets)"
    else:
        why = f"{why} (the script's own {words})"
    return Change(kind=kind, code=finding.code, why=why, ops=(),
                  precision=kind in ("bf16", "fp16", "tf32"), file="", switches=edits)


def add_switches(argv: tuple[str, ...], edits) -> tuple[str, ...]:
    """``argv`` with each switch on: a bare flag appended where the command line does not give it;
    a valued option's value replaced where the command line sets it, else the option appended
    (before a bare ``--``)."""
    from gpudoctor.fix.options import _matches, rewrite_argv

    out = list(argv)
    for edit in edits:
        stop = out.index("--") if "--" in out else len(out)
        given = any(w.startswith("-") and _matches(w, edit) is not None for w in out[:stop])
        if edit.value and given:
            out = list(rewrite_argv(tuple(out), edit)[0])
        elif not given:
            out[stop:stop] = [_long(edit)] + ([edit.value] if edit.value else [])
    return tuple(out)


def given_switches(changes, advice, argv: tuple[str, ...], findings=()):
    """``(changes, advice)`` with each command-line change whose flags the command line already
    gives (with the same values) turned into advice saying so: nothing would differ to measure."""
    from gpudoctor.fix.ops import Advice

    kept, more = [], []
    for change in changes:
        if change.switches and add_switches(argv, change.switches) == tuple(argv):
            words = " ".join(f"{_long(e)}{' ' + e.value if e.value else ''}" for e in change.switches)
            more.append(Advice(code=change.code, reason=f"{change.kind}: your command line gives the script's own "
                               f"{words} already; the finding stands with it on",
                               fix=next((f.fix for f in findings if f.code == change.code), "")))
        else:
            kept.append(change)
    return kept, list(advice) + more


def _long(edit: OptionEdit) -> str:
    return next((f for f in edit.flags if f.startswith("--")), edit.flags[0])


def switch_lines(changes, command: str, measured: bool) -> list[str]:
    """What to run for the command-line changes kept (or planned, with ``--no-measure``)."""
    changes = [c for c in changes if c.switches]
    if not changes:
        return []
    words = " ".join(f"{_long(e)}{' ' + e.value if e.value else ''}" for c in changes for e in c.switches)
    kinds = ", ".join(c.kind for c in changes)
    how = "as the patched run was measured" if measured else "not measured (--no-measure)"
    return [f"command line: the script implements {kinds} behind its own {words}; run with "
            f"{'it' if len(changes) == 1 and len(changes[0].switches) == 1 else 'them'}, {how}:", f"    {command}"]


def own_switch(found, node: ast.AST | None) -> str:
    """``: run it with --amp`` where an off-by-default flag of the script turns ``node`` on."""
    flag = switch(found, node) if node is not None else ""
    return f": it is behind the script's own {flag}, off by default; run it with {flag}" if flag else ""


def autocast_call(found) -> ast.Call | None:
    def name(call: ast.Call) -> str:
        return call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")

    return next((c for c, _ in found.ctx.calls if name(c) == "autocast"), None)


__all__ = ["BF16", "KEYWORDS", "SIGNS", "add_switches", "autocast_call", "given_switches", "guarded", "own_switch", "switch_change",
           "switch_edits", "switch_lines"]
