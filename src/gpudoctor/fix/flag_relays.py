"""How a flag reaches the code it turns on when it is not read there directly (for
:mod:`gpudoctor.fix.switches`): a ``store_true`` flag and its ``store_false`` twin sharing one dest,
and flags relayed through the constants the code they guard assigns (timm 0.4's ``--amp``)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.fix.options import Option, parser_options


def twins(tree: ast.AST, options: dict[str, Option | None]) -> dict[str, Option | None]:
    """``options`` with a dest shared by one ``store_true`` flag and its ``store_false`` twin(s)
    (Vim's ``--if_amp`` / ``--no_amp``, DeiT's ``--pin-mem`` / ``--no-pin-mem``) given the
    ``store_true`` one: it is the flag that turns the code on. Other shared dests stay ambiguous."""
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr == "add_argument"]
    out = dict(options)
    for dest in [d for d, o in options.items() if o is None]:
        group = [o for c in calls for o in parser_options(ast.Module(body=[ast.Expr(c)], type_ignores=[])).values()
                 if o is not None and o.dest == dest]
        on = [o for o in group if o.action == "store_true"]
        if len(on) == 1 and all(o.action == "store_false" for o in group if o is not on[0]):
            out[dest] = on[0]
    return out


def set_under(code: ast.AST) -> list[tuple[str, object]]:
    """``(name, value)`` of the constants the guarded ``code`` assigns: ``use_amp = 'native'``,
    ``args.native_amp = True`` (a truthy constant to a bare name or an attribute of one)."""
    return [(ast.unparse(t), n.value.value) for n in ast.walk(code) if isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Constant) and n.value.value for t in n.targets
            if isinstance(t, ast.Name) or (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name))]


def relayed(tree: ast.AST, code: ast.AST, depth: int = 2) -> Iterator[ast.AST]:
    """The code turned on, through up to ``depth`` assignments, by the ``code`` a flag guards:
    timm 0.4's ``if args.amp: args.native_amp = True``, then ``if args.native_amp: use_amp =
    'native'``, then ``if use_amp == 'native': amp_autocast = torch.cuda.amp.autocast``. An ``if``
    counts when its test reads the name (not under ``not``) and, where it compares the name with
    constants, one of them is the value assigned."""
    for name, value in set_under(code) if depth else ():
        for node in ast.walk(tree):
            if not isinstance(node, (ast.If, ast.IfExp)):
                continue
            hidden = {id(x) for n in ast.walk(node.test) if isinstance(n, ast.UnaryOp)
                      and isinstance(n.op, ast.Not) for x in ast.walk(n.operand)}
            reads = [n for n in ast.walk(node.test) if isinstance(n, (ast.Name, ast.Attribute))
                     and ast.unparse(n) == name and id(n) not in hidden]
            compared = [c for c in ast.walk(node.test) if isinstance(c, ast.Compare)
                        and any(ast.unparse(x) == name for x in [c.left, *c.comparators])]
            if not reads or (compared and not any(isinstance(x, ast.Constant) and x.value == value
                                                  for c in compared for x in c.comparators + [c.left])):
                continue
            body = ast.Module(body=node.body, type_ignores=[]) if isinstance(node, ast.If) else node.body
            yield body
            yield from relayed(tree, body, depth - 1)


__all__ = ["relayed", "set_under", "twins"]
