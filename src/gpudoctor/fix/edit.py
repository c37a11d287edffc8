"""Apply :class:`~gpudoctor.fix.ops.Change` objects to a source with libcst, keeping every other
byte of the file (comments, layout, quotes), as ``lint --fix`` does (:mod:`gpudoctor.lint.fix`).

Each edit finds its node by position (``PositionProvider``, the same ``(line, column)`` the
locator computed); an edit whose node is not found (a statement sharing its line with another,
a one-line ``for x in y: stmt`` body ...) is reported, and the caller drops its change.
The ``# gpudoctor fix: CODE — why`` comment goes on its own line above the changed statement.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpudoctor.fix.ops import INSERT_AFTER, INSERT_BEFORE, REPLACE, SET_KWARGS, WRAP, Change, Op, Pos


def _cst():
    import warnings

    with warnings.catch_warnings():  # libcst's metadata package imports deprecated typing helpers
        warnings.simplefilter("ignore", DeprecationWarning)
        import libcst as cst
        from libcst.metadata import MetadataWrapper, PositionProvider
    return cst, MetadataWrapper, PositionProvider


def apply_changes(source: str, changes: Sequence[Change]) -> tuple[str, list[str]]:
    """``source`` with ``changes`` applied, and the kinds of the changes some edit of which found
    no node (their other edits may be applied: the caller re-applies without them).

    Raises:
        libcst.ParserSyntaxError: ``source`` does not parse.
    """
    cst, MetadataWrapper, PositionProvider = _cst()
    if not changes:
        return source, []
    wrapper = MetadataWrapper(cst.parse_module(source))
    owner: dict[int, Change] = {}
    by_kind: dict[str, dict[Pos, list[Op]]] = {k: {} for k in (SET_KWARGS, INSERT_BEFORE, INSERT_AFTER, WRAP, REPLACE)}
    comments: dict[Pos, list[str]] = {}
    for change in changes:
        for op in change.ops:
            owner[id(op)] = change
            by_kind[op.kind].setdefault(op.at, []).append(op)
            if op.kind in (SET_KWARGS, REPLACE) and change.comment_for(op) not in comments.get(op.stmt, []):
                comments.setdefault(op.stmt, []).append(change.comment_for(op))
    applied: set[int] = set()

    def comment_line(text: str):
        return cst.EmptyLine(comment=cst.Comment(text))

    def statements(op: Op) -> list:
        out = [cst.parse_statement(line) for line in op.text]
        out[0] = out[0].with_changes(leading_lines=[comment_line(owner[id(op)].comment_for(op))])
        return out

    def kwarg(name: str, value: str):
        eq = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
        return cst.Arg(keyword=cst.Name(name), value=cst.parse_expression(value), equal=eq)

    class Applier(cst.CSTTransformer):
        METADATA_DEPENDENCIES = (PositionProvider,)

        def _pos(self, node) -> Pos:
            start = self.get_metadata(PositionProvider, node).start
            return start.line, start.column

        def leave_Call(self, original, updated):
            for op in by_kind[SET_KWARGS].get(self._pos(original), ()):
                # ``x.to(d).view(n)``: both calls start here; ``op.text`` names the one meant
                if op.text and cst.Module(body=[]).code_for_node(original.func) != op.text[0]:
                    continue
                applied.add(id(op))
                updated = self._set_kwargs(updated, op.kwargs)
            return self._replace(original, updated)

        def leave_Attribute(self, original, updated):
            return self._replace(original, updated)

        def _replace(self, original, updated):
            # ``op.text``: (replacement, the expression replaced); ``a.b`` and ``a.b.item`` start alike
            for op in by_kind[REPLACE].get(self._pos(original), ()):
                if cst.Module(body=[]).code_for_node(original) == op.text[1]:
                    applied.add(id(op))
                    return cst.parse_expression(op.text[0])
            return updated

        @staticmethod
        def _set_kwargs(call, pairs):
            args, wanted = list(call.args), dict(pairs)
            for i, arg in enumerate(args):
                if arg.keyword is not None and arg.keyword.value in wanted:
                    args[i] = arg.with_changes(value=cst.parse_expression(wanted.pop(arg.keyword.value)))
            star = next((i for i, a in enumerate(args) if a.star == "**"), None)
            if star is not None and wanted:
                # ``**kw`` may hold the same names: merge into it so the new values win, no clash
                merged = ", ".join(f'"{name}": {value}' for name, value in wanted.items())
                code = cst.Module(body=[]).code_for_node(args[star].value)
                args[star] = args[star].with_changes(value=cst.parse_expression(f"{{**{code}, {merged}}}"))
                wanted = {}
            extra = [kwarg(name, value) for name, value in wanted.items()]
            if extra and args and isinstance(args[-1].comma, cst.Comma):
                # one argument per line with a trailing comma: keep that layout
                closing = args[-1].comma
                between = args[-2].comma if len(args) > 1 and isinstance(args[-2].comma, cst.Comma) else closing
                args[-1] = args[-1].with_changes(comma=between)
                extra = [a.with_changes(comma=between) for a in extra[:-1]] + [extra[-1].with_changes(comma=closing)]
            elif extra and args:
                # one argument per line without a trailing comma: the new ones one per line too,
                # the closing parenthesis keeps its line
                prev = args[-2].comma if len(args) > 1 else None
                multiline = isinstance(prev, cst.Comma) and "\n" in cst.Module(body=[]).code_for_node(prev)
                sep = prev if multiline else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                tail = args[-1].whitespace_after_arg
                args[-1] = args[-1].with_changes(comma=sep, whitespace_after_arg=cst.SimpleWhitespace(""))
                extra = [a.with_changes(comma=sep) for a in extra[:-1]] + [
                    extra[-1].with_changes(whitespace_after_arg=tail)]
            return call.with_changes(args=[*args, *extra])

        def _body(self, originals, updated) -> list:
            out, i = [], 0
            while i < len(originals):
                pos, node = self._pos(originals[i]), updated[i]
                notes = comments.get(pos, [])
                if notes:
                    node = node.with_changes(leading_lines=[*node.leading_lines, *map(comment_line, notes)])
                for op in by_kind[INSERT_BEFORE].get(pos, ()):
                    applied.add(id(op))
                    new = statements(op)
                    new[0] = new[0].with_changes(leading_lines=[*node.leading_lines, *new[0].leading_lines])
                    node = node.with_changes(leading_lines=[])
                    out += new
                wraps = by_kind[WRAP].get(pos, ())
                ends = [j for j in range(i, len(originals)) if wraps and self._pos(originals[j]) == wraps[0].last]
                if wraps and ends:
                    op, j = wraps[0], ends[0]
                    applied.add(id(op))
                    inner = [node.with_changes(leading_lines=[]), *updated[i + 1:j + 1]]
                    with_node = cst.With(
                        items=[cst.WithItem(item=cst.parse_expression(op.text[0]))],
                        body=cst.IndentedBlock(body=inner),
                        leading_lines=[*node.leading_lines, comment_line(owner[id(op)].comment_for(op))])
                    out.append(with_node)
                    last = self._pos(originals[j])
                    out += [s for op in by_kind[INSERT_AFTER].get(last, ()) for s in self._after(op)]
                    i = j + 1
                    continue
                out.append(node)
                out += [s for op in by_kind[INSERT_AFTER].get(pos, ()) for s in self._after(op)]
                i += 1
            return out

        def _after(self, op: Op) -> list:
            applied.add(id(op))
            return statements(op)

        def leave_IndentedBlock(self, original, updated):
            return updated.with_changes(body=self._body(original.body, updated.body))

        def leave_Module(self, original, updated):
            return updated.with_changes(body=self._body(original.body, updated.body))

    code = wrapper.visit(Applier()).code
    missed = []
    for change in changes:
        if any(id(op) not in applied for op in change.ops) and change.kind not in missed:
            missed.append(change.kind)
    return code, missed


def apply_located(source: str, changes: Sequence[Change]) -> tuple[str, list[Change], list[Change]]:
    """Apply what can be applied whole: ``(new source, applied changes, dropped changes)``."""
    kept = list(changes)
    while True:
        code, missed = apply_changes(source, kept)
        if not missed:
            return code, kept, [c for c in changes if c not in kept]
        kept = [c for c in kept if c.kind not in missed]


def lint_fixes(source: str, path: str) -> tuple[str, tuple[str, ...]]:
    """``lint --fix``'s safe rewrites (``x.to(d)`` kept, ``zero_grad(set_to_none=False)`` dropped,
    ``torch.cuda.amp`` moved to ``torch.amp``): the new source and the rule codes that fired."""
    from gpudoctor.lint.engine import lint_source
    from gpudoctor.lint.fix import FIXED_CODES, apply_fixes
    from gpudoctor.lint.registry import ALL_RULES

    rules = [r for r in ALL_RULES if r.CODE in FIXED_CODES and r.CODE != "GD104"]  # loaders: the run's plan
    found = [v for v in lint_source(source, path, rules) if v.code in FIXED_CODES]
    if not found:
        return source, ()
    return apply_fixes(source, found), tuple(sorted({v.code for v in found}))


__all__ = ["apply_changes", "apply_located", "lint_fixes"]
