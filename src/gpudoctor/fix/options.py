"""The script's own command-line options: which ``DataLoader`` keyword a user controls with a flag,
and the command line that keeps that flag working after a fix.

A keyword whose value is an attribute of the namespace the file parses from its command line
(``num_workers=args.workers``, ``int(opt.workers)``, where ``args = parser.parse_args()`` and
``parser.add_argument("-j", "--workers", default=4, type=int)``) is changed where the user controls
it: the option's ``default=``, never the call (a literal there would make ``-j 16`` do nothing).
The namespace is followed through a function's parameters to every place the function is called or
handed to ``mp.spawn(f, args=(...))`` or ``mp.spawn(f, (...), n)`` (three calls deep at most), and
through ``global args`` where every function that declares it binds it only to the parse (swav's
``main``); the option's ``dest`` is resolved
as argparse does (``dest=``, else the first long option with ``-`` made ``_``, else the first short).

A command line that sets the option itself (``-j 4``, ``-j4``, ``-j=4``, ``--workers 4``,
``--workers=4``, ``--work 4`` as argparse's unique prefix) is not changed by a default:
:func:`rewrite_argv` gives the command line with the new value, the one ``fix`` measures and tells
the user to run. Everything here is static; nothing of the script is imported or run.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from gpudoctor.fix.ops import OptionEdit

_DEPTH = 3  # calls followed from the loader's function back to the parse
Said = tuple[str, str] | None  # how a command line set an option, and how it sets it now


@dataclass(frozen=True, slots=True)
class Option:
    """One ``add_argument`` call with option strings, and what argparse makes of it."""

    call: ast.Call
    flags: tuple[str, ...]
    dest: str
    default: ast.AST | None
    action: str | None


def dest_of(flags: tuple[str, ...], explicit: str | None = None) -> str:
    """argparse's ``dest``: ``dest=``, else the first ``--long`` option, else the first short one."""
    if explicit:
        return explicit
    longs = [f for f in flags if f.startswith("--") and len(f) > 2]
    return (longs[0] if longs else flags[0]).lstrip("-").replace("-", "_")


def parser_options(tree: ast.AST) -> dict[str, Option | None]:
    """``dest`` -> its option, for every ``X.add_argument("-f", ...)`` of the file; ``None`` where two
    calls share a dest (ambiguous: neither is used)."""
    out: dict[str, Option | None] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument" and node.args):
            continue
        if not all(isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")
                   for a in node.args):
            continue  # a positional argument, or flags not written out
        kw = {k.arg: k.value for k in node.keywords if k.arg is not None}
        explicit = kw.get("dest")
        action = kw.get("action")
        flags = tuple(a.value for a in node.args)
        dest = dest_of(flags, explicit.value if isinstance(explicit, ast.Constant) else None)
        if explicit is not None and not isinstance(explicit, ast.Constant):
            continue
        option = Option(call=node, flags=flags, dest=dest, default=kw.get("default"),
                        action=action.value if isinstance(action, ast.Constant) else
                        ("other" if action is not None else None))
        out[dest] = None if dest in out or any(k.arg is None for k in node.keywords) else option
    return out


def _is_parse(value: ast.AST | None, first: bool) -> bool:
    """``P.parse_args()`` / ``P.parse_args(sys.argv[1:])``; ``P.parse_known_args()`` when ``first``
    (the namespace is the first of the pair it returns)."""
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)):
        return False
    wanted = "parse_known_args" if first else "parse_args"
    if value.func.attr != wanted or value.keywords or len(value.args) > 1:
        return False
    return not value.args or ast.unparse(value.args[0]) == "sys.argv[1:]"


def _bindings(found, name: str, scope: ast.AST | None) -> list[bool] | None:
    """For each binding of ``name`` in ``scope``: whether it is the parsed namespace; ``None`` where
    ``name`` is bound in some other way (a loop target, ``with ... as``, ``global`` ...)."""
    from gpudoctor.fix.locate import _scope

    count = len(found.ctx.assigns.get(scope, {}).get(name, [])) - len(_declared_global(found, name, scope))
    out = []
    for node in ast.walk(scope or found.ctx.tree):
        if not isinstance(node, ast.Assign) or _scope(found, node) is not scope:
            continue
        for target in node.targets:
            if isinstance(target, ast.Name) and target.id == name:
                out.append(_is_parse(node.value, first=False))
            elif isinstance(target, ast.Tuple) and any(isinstance(e, ast.Name) and e.id == name for e in target.elts):
                first = isinstance(target.elts[0], ast.Name) and target.elts[0].id == name
                out.append(first and len(target.elts) == 2 and _is_parse(node.value, first=True))
    return out if len(out) == count else None


def _declared_global(found, name: str, scope: ast.AST | None) -> list[ast.Global]:
    """The ``global name`` statements of ``scope`` (a function; none at the module)."""
    from gpudoctor.fix.locate import _scope

    return [n for n in ast.walk(scope) if isinstance(n, ast.Global) and name in n.names
            and _scope(found, n) is scope] if scope is not None else []


def _global_namespace(found, name: str) -> bool:
    """``name`` is a module global bound only to the parsed namespace: by ``global name`` in every
    function that binds it (swav's ``def main(): global args; args = parser.parse_args()``) and by
    nothing else at the module level (a module-level parse counts too)."""
    funcs = {s for s in found.ctx.assigns if s is not None and _declared_global(found, name, s)}
    if not funcs:
        return False
    for scope in (None, *funcs):
        kinds = _bindings(found, name, scope) if found.ctx.assigns.get(scope, {}).get(name) else []
        if kinds is None or not all(kinds) or (scope is not None and not kinds):
            return False
    return True


def _sites(found, func: ast.FunctionDef, param: str) -> list[tuple[ast.AST | None, ast.AST | None]] | None:
    """``(argument, scope)`` for ``param`` at every call of ``func`` in the file (``func(...)``, or
    ``mp.spawn(func, args=(...))`` or ``mp.spawn(func, (...), n)``, which passes the process index
    first); ``None`` where ``func``
    is used in any other way (a method, passed elsewhere, an argument not found)."""
    from gpudoctor.fix.locate import _argument, _scope

    if func in found.ctx.func_cls:
        return None
    names = [a.arg for a in func.args.posonlyargs + func.args.args]
    out = []
    for node in ast.walk(found.ctx.tree):
        if not (isinstance(node, ast.Name) and node.id == func.name and isinstance(node.ctx, ast.Load)):
            continue
        call = next((c for c, _ in found.ctx.calls if c.func is node), None)
        if call is not None:
            out.append((_argument(found, func, call, param), _scope(found, call)))
            continue
        spawn = next((c for c, _ in found.ctx.calls if c.args and c.args[0] is node
                      and isinstance(c.func, ast.Attribute) and c.func.attr == "spawn"), None)
        args = None
        if spawn is not None:  # spawn(fn, args=(), nprocs=1, ...): the tuple by keyword or second
            args = next((k.value for k in spawn.keywords if k.arg == "args"), spawn.args[1] if len(spawn.args) > 1
                        else None)
        if not isinstance(args, ast.Tuple) or param not in names or names.index(param) == 0:
            return None
        i = names.index(param) - 1
        out.append((args.elts[i] if i < len(args.elts) else None, _scope(found, spawn)))
    return out or None


def is_namespace(found, name: str, scope: ast.AST | None, depth: int = 0) -> bool:
    """Whether ``name``, read in ``scope`` (a function, ``None``: the module), always holds the
    namespace parsed from the command line."""
    params = found.ctx.params.get(scope, set())
    bound = found.ctx.assigns.get(scope, {}).get(name)
    if scope is not None and _declared_global(found, name, scope):
        return _global_namespace(found, name)
    if bound:
        kinds = _bindings(found, name, scope)
        return bool(kinds) and all(kinds) and name not in params
    if name in params:
        if depth >= _DEPTH or not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        sites = _sites(found, scope, name)
        return bool(sites) and all(isinstance(arg, ast.Name) and is_namespace(found, arg.id, where, depth + 1)
                                   for arg, where in sites)
    if scope is not None:
        return is_namespace(found, name, None, depth)  # a module-level name read in the function
    return _global_namespace(found, name)  # bound only in functions, by ``global``


def _attribute(value: ast.AST) -> ast.Attribute | None:
    """``args.workers`` of ``args.workers`` and ``int(args.workers)``."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "int" \
            and len(value.args) == 1 and not value.keywords:
        value = value.args[0]
    return value if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) else None


def traced_option(found, value: ast.AST, call: ast.Call) -> Option | None:
    """The command-line option ``value`` (a keyword of ``call``) reads, or ``None`` where it is not
    traced (a parameter filled elsewhere, a config object, a dict, another file ...)."""
    from gpudoctor.fix.locate import _scope

    attr = _attribute(value)
    if attr is None:
        return None
    option = parser_options(found.ctx.tree).get(attr.attr)
    if option is None or not is_namespace(found, attr.value.id, _scope(found, call)):
        return None
    return option


def switch(found, node: ast.AST) -> str:
    """The script's own off-by-default ``store_true`` flag that turns ``node`` on (``--amp`` of
    ``if args.amp: model.compile()`` or ``autocast(enabled=args.amp)``), or ``""``: ``fix`` names
    the flag to run with rather than patching what the script already does behind it."""
    from gpudoctor.lint.flow import parents

    options, up = parser_options(found.ctx.tree), parents(found.ctx)
    tests = [k.value for k in node.keywords] if isinstance(node, ast.Call) else []
    child, parent = node, up.get(id(node))
    while parent is not None:
        if isinstance(parent, (ast.If, ast.IfExp)) and child is not parent.test:
            tests.append(parent.test)
        child, parent = parent, up.get(id(parent))
    for test in tests:
        for attr in ast.walk(test):
            option = options.get(attr.attr) if isinstance(attr, ast.Attribute) else None
            if option is not None and option.action == "store_true" and not (
                    isinstance(option.default, ast.Constant) and option.default.value):
                return next((f for f in option.flags if f.startswith("--")), option.flags[0])
    return ""


def divided(found, option: Option) -> tuple[int, str, str] | None:
    """Where the script rebinds the option to itself divided by a process count before its loader
    reads it (pytorch/examples imagenet, moco: ``args.workers = int((args.workers + ngpus_per_node -
    1) / ngpus_per_node)``): ``(line, divisor as written, what it counts)``, the last ``"node"``
    (a name with ``node``, ``local`` or ``ngpus``, ``device_count()``), ``"world"`` (``world_size``)
    or ``""`` (some other divisor); ``None`` where the option is never divided. The option then is a
    total over those processes, not a per-process count."""
    for node in ast.walk(found.ctx.tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Attribute) and node.targets[0].attr == option.dest):
            continue
        reads = any(isinstance(n, ast.Attribute) and n.attr == option.dest and isinstance(n.ctx, ast.Load)
                    for n in ast.walk(node.value))
        div = next((n for n in ast.walk(node.value) if isinstance(n, ast.BinOp)
                    and isinstance(n.op, (ast.Div, ast.FloorDiv))), None)
        if not reads or div is None:
            continue
        text = ast.get_source_segment(found.ctx.source, div.right) or ast.unparse(div.right)
        low = text.lower()
        counts = ("node" if any(w in low for w in ("node", "local", "ngpus", "device_count")) else
                  "world" if "world_size" in low else "")
        return node.lineno, text, counts
    return None


def readers(found, dest: str) -> list[int]:
    """The lines that read ``<name>.<dest>`` of some name (the option's other uses)."""
    return sorted({n.lineno for n in ast.walk(found.ctx.tree) if isinstance(n, ast.Attribute) and n.attr == dest
                   and isinstance(n.value, ast.Name) and isinstance(n.ctx, ast.Load)})


def long_flags(tree: ast.AST) -> tuple[str, ...]:
    """Every ``--long`` option of the file (argparse accepts a unique prefix of one)."""
    return tuple(sorted({f for o in parser_options(tree).values() if o is not None for f in o.flags
                         if f.startswith("--")}))


def _matches(word: str, edit: OptionEdit) -> tuple[str, str | None] | None:
    """``(flag as written, value attached or None)`` where ``word`` names ``edit``'s option."""
    name, eq, attached = word.partition("=")
    if word.startswith("--"):
        if name in edit.flags:
            return name, attached if eq else None
        prefixed = [f for f in edit.longs if f.startswith(name)] if len(name) > 2 else []
        if len(prefixed) == 1 and prefixed[0] in edit.flags:
            return name, attached if eq else None
        return None
    if name in edit.flags:  # -j, -j=4, a one-dash long option (-lr 0.1)
        return name, attached if eq else None
    for flag in edit.flags:
        if len(flag) == 2 and word.startswith(flag):  # -j4
            rest = word[2:]
            return flag, (rest[1:] if rest.startswith("=") else rest) if rest else None
    return None


def rewrite_argv(argv: tuple[str, ...], edit: OptionEdit) -> tuple[tuple[str, ...], Said]:
    """``argv`` with every value given to ``edit``'s option replaced by ``edit.value``, and how the
    command line set it and now sets it (``("-j 4", "-j 8")``: the last one, the one argparse
    keeps); ``None``: not set there. Words after a bare ``--`` are positional for argparse and left
    alone."""
    out, said, i = list(argv), None, 0
    while i < len(out):
        word = out[i]
        if word == "--":
            break
        hit = _matches(word, edit) if word.startswith("-") else None
        if hit is None:
            i += 1
            continue
        flag, attached = hit
        if attached is not None:
            sep = "=" if word[len(flag):].startswith("=") else ""
            out[i] = f"{flag}{sep}{edit.value}"
            said = (word, out[i])
            i += 1
        elif i + 1 < len(out):
            said = (f"{word} {out[i + 1]}", f"{word} {edit.value}")
            out[i + 1] = edit.value
            i += 2
        else:
            i += 1
    return tuple(out), said


def command_line(argv: tuple[str, ...], edits) -> tuple[tuple[str, ...], list[tuple[OptionEdit, Said]]]:
    """``argv`` rewritten for every option edit of ``edits``, and each edit with how the command
    line set it and sets it now (``None``: it does not set it; the new default applies)."""
    said = []
    for edit in edits:
        argv, how = rewrite_argv(argv, edit)
        said.append((edit, how))
    return argv, said


def shown(argv: tuple[str, ...], script: str) -> str:
    """The command line to run, quoted as a shell would need it."""
    import shlex

    return " ".join(shlex.quote(w) for w in ("python", script, *argv))


__all__ = ["Option", "command_line", "dest_of", "divided", "is_namespace", "long_flags", "parser_options", "readers",
           "rewrite_argv", "shown", "switch", "traced_option"]
