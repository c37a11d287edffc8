"""``--fix``: rewrite the safe violations with libcst, keeping every other byte of the file.

Fixed: GD101 (``x.to(d)`` -> ``x = x.to(d)``), GD104 (add ``num_workers=4, pin_memory=True``),
GD204 (drop ``set_to_none=False``), GD301 (``torch.cuda.amp`` -> ``torch.amp`` with the device
type). libcst is imported here only, so linting without ``--fix`` never loads it.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpudoctor.records.lint import LintViolation

FIXED_CODES = ("GD101", "GD104", "GD204", "GD301")
_AUTOCAST_POSITIONAL = ("enabled", "dtype", "cache_enabled")
_AMP_NAMES = frozenset({"autocast", "GradScaler", "custom_fwd", "custom_bwd"})
_DEFAULTS = (("num_workers", "4"), ("pin_memory", "True"))


def apply_fixes(source: str, violations: Sequence[LintViolation]) -> str:
    """Return ``source`` with the fixable ``violations`` rewritten (unchanged if none apply).

    Raises:
        ModuleNotFoundError: libcst is not installed (``pip install libcst``).
    """
    import warnings

    with warnings.catch_warnings():  # libcst's metadata package imports deprecated typing helpers
        warnings.simplefilter("ignore", DeprecationWarning)
        import libcst as cst
        from libcst.metadata import MetadataWrapper, PositionProvider

    targets = {(v.line, v.col - 1): v.code for v in violations if v.code in FIXED_CODES}
    if not targets:
        return source
    loader_keywords = _loader_keywords(source) if "GD104" in targets.values() else {}
    renamed = _rewritable_amp_names(source)
    module = cst.parse_module(source)
    wrapper = MetadataWrapper(module)

    def kw(name: str, value: cst.BaseExpression) -> cst.Arg:
        eq = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
        return cst.Arg(keyword=cst.Name(name), value=value, equal=eq)

    def device_of(func: cst.BaseExpression) -> str:
        node = func
        while isinstance(node, cst.Attribute):
            if isinstance(node.value, cst.Attribute) and node.value.attr.value in ("cuda", "cpu") \
                    and node.attr.value == "amp":
                return node.value.attr.value
            node = node.value
        return "cuda"

    def drop_device(func: cst.BaseExpression) -> cst.BaseExpression:
        """``torch.cuda.amp.X`` -> ``torch.amp.X``; anything else unchanged."""
        if (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Attribute)
                and func.value.attr.value == "amp" and isinstance(func.value.value, cst.Attribute)
                and func.value.value.attr.value in ("cuda", "cpu")):
            amp = func.value.with_changes(value=func.value.value.value)
            return func.with_changes(value=amp)
        return func

    def last_name(func: cst.BaseExpression) -> str:
        if isinstance(func, cst.Attribute):
            return func.attr.value
        return func.value if isinstance(func, cst.Name) else ""

    class Fixer(cst.CSTTransformer):
        METADATA_DEPENDENCIES = (PositionProvider,)

        def __init__(self) -> None:
            super().__init__()
            self.hit: dict[int, str] = {}

        def _code(self, node: cst.CSTNode) -> str | None:
            pos = self.get_metadata(PositionProvider, node).start
            return targets.get((pos.line, pos.column))

        def visit_Call(self, node: cst.Call) -> None:
            code = self._code(node)
            if code:
                self.hit[id(node)] = code

        def visit_Decorator(self, node: cst.Decorator) -> None:
            if not isinstance(node.decorator, cst.Call) and self._code(node.decorator) == "GD301":
                self.hit[id(node)] = "GD301"

        def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
            if self._code(node) == "GD301":
                self.hit[id(node)] = "GD301"

        def visit_Expr(self, node: cst.Expr) -> None:
            if self._code(node) == "GD101":
                self.hit[id(node)] = "GD101"

        def leave_Expr(self, original: cst.Expr, updated: cst.Expr):
            if self.hit.get(id(original)) == "GD101" and isinstance(updated.value, cst.Call):
                func = updated.value.func
                if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
                    return cst.Assign(targets=[cst.AssignTarget(target=cst.Name(func.value.value))],
                                      value=updated.value, semicolon=updated.semicolon)
            return updated

        def leave_Call(self, original: cst.Call, updated: cst.Call):
            code = self.hit.get(id(original))
            if code == "GD204":
                args = [a for a in updated.args if not (a.keyword and a.keyword.value == "set_to_none")]
                if args:
                    args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                return updated.with_changes(args=args)
            if code == "GD104":
                pos = self.get_metadata(PositionProvider, original).start
                addable = loader_keywords.get((pos.line, pos.column), ())
                extra = [kw(name, cst.parse_expression(value)) for name, value in _DEFAULTS if name in addable]
                args = list(updated.args)
                if extra and args and isinstance(args[-1].comma, cst.Comma):
                    # one argument per line with a trailing comma: keep that layout
                    closing = args[-1].comma
                    between = args[-2].comma if len(args) > 1 and isinstance(args[-2].comma, cst.Comma) else closing
                    args[-1] = args[-1].with_changes(comma=between)
                    extra = [a.with_changes(comma=between) for a in extra[:-1]] + [extra[-1].with_changes(comma=closing)]
                return updated.with_changes(args=[*args, *extra])
            if code == "GD301":
                return self._amp_call(updated)
            return updated

        def _amp_call(self, call: cst.Call) -> cst.Call:
            name, dev = last_name(call.func), device_of(call.func)
            name = renamed.get(name, name) if isinstance(call.func, cst.Name) else name
            if drop_device(call.func) is call.func and not (
                    isinstance(call.func, cst.Name) and call.func.value in renamed):
                return call  # ``amp.autocast()`` via another alias: no safe rewrite, leave it reported
            device = cst.SimpleString(f'"{dev}"')
            args = list(call.args)
            if name == "autocast":
                converted = []
                for i, arg in enumerate(args):
                    if arg.keyword is None and not arg.star and i < len(_AUTOCAST_POSITIONAL):
                        arg = kw(_AUTOCAST_POSITIONAL[i], arg.value).with_changes(comma=arg.comma)
                    converted.append(arg)
                args = [cst.Arg(value=device), *converted]
            elif name == "GradScaler":
                args = [cst.Arg(value=device), *args]
            elif name in ("custom_fwd", "custom_bwd"):
                args = [*args, kw("device_type", device)]
            return call.with_changes(func=drop_device(call.func), args=args)

        def leave_Decorator(self, original: cst.Decorator, updated: cst.Decorator):
            if self.hit.get(id(original)) == "GD301":
                dev = device_of(updated.decorator)
                if drop_device(updated.decorator) is updated.decorator and not (
                        isinstance(updated.decorator, cst.Name) and updated.decorator.value in renamed):
                    return updated
                call = cst.Call(func=drop_device(updated.decorator),
                                args=[kw("device_type", cst.SimpleString(f'"{dev}"'))])
                return updated.with_changes(decorator=call)
            return updated

        def leave_ImportFrom(self, original: cst.ImportFrom, updated: cst.ImportFrom):
            if self.hit.get(id(original)) != "GD301" or isinstance(updated.names, cst.ImportStar):
                return updated
            if not all(isinstance(a.name, cst.Name) and a.name.value in _AMP_NAMES for a in updated.names):
                return updated  # something else is imported from the old module: leave it to the user
            if not isinstance(updated.module, cst.Attribute) or not isinstance(updated.module.value, cst.Attribute):
                return updated
            return updated.with_changes(module=cst.Attribute(value=cst.Name("torch"), attr=cst.Name("amp")))

    return wrapper.visit(Fixer()).code


def _loader_keywords(source: str) -> dict[tuple[int, int], tuple[str, ...]]:
    """(line, character column) of each DataLoader call -> the keywords GD104 reported as missing
    there: a loader reported only for ``pin_memory`` (a ``TensorDataset``) gets no ``num_workers``."""
    import ast

    from gpudoctor.lint.rules.gd104_dataloader_defaults import LOADERS, missing
    from gpudoctor.lint.walker import build_context

    lines = source.split("\n")
    ctx = build_context("<fix>", source, ast.parse(source))
    out: dict[tuple[int, int], tuple[str, ...]] = {}
    for call, where in ctx.calls:
        if ctx.qualname(call.func) in LOADERS:
            text = lines[call.lineno - 1]
            col = len(text.encode("utf-8")[:call.col_offset].decode("utf-8", errors="ignore"))
            out[(call.lineno, col)] = tuple(missing(call, ctx, where.func)[1])
    return out


def _rewritable_amp_names(source: str) -> dict[str, str]:
    """Local names bound by ``from torch.cuda.amp import autocast, GradScaler`` lines that ``--fix``
    may move to ``torch.amp`` (every name on the line is one ``torch.amp`` also has)."""
    import ast

    names: dict[str, str] = {}  # local name -> the name in torch.amp
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module in ("torch.cuda.amp", "torch.cpu.amp") and not node.level:
            if all(alias.name in _AMP_NAMES for alias in node.names):
                names.update({alias.asname or alias.name: alias.name for alias in node.names})
    return names
