"""Build a :class:`~gpudoctor.lint.scope.FileContext` in one pass over a parsed file."""

from __future__ import annotations

import ast
import re
from dataclasses import replace

from gpudoctor.lint.project import star_imports
from gpudoctor.lint.scope import (
    DATASET_BASES,
    MODULE_BASES,
    NO_GRAD,
    FileContext,
    Where,
    call_name,
    is_const,
    kwarg,
    last_ident,
)

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_GPU = re.compile(r"cuda|nccl|accelerator|device")
_TEST_MODULE = re.compile(r"(?:^test_.*|.*[_-]tests?|^conftest)\.py$")  # test_x, x_test(s), x-test(s), conftest
_COMPATIBLE = ({"tensor", "cuda_tensor"}, {"module", "wrapper"})
# GPU frameworks other than PyTorch: a file importing one of them and never torch runs its GPU
# work there, and the torch advice (torch.cuda.synchronize, DataLoader workers) does not apply
_OTHER_FRAMEWORKS = frozenset({"mxnet", "tensorflow", "jax", "paddle", "oneflow", "mindspore", "cupy"})
_ACCEL_WORD = re.compile(r"cuda|nccl|gpu|accelerator|mps|xla|xpu|hpu|npu", re.IGNORECASE)


def _cpu_device(node: ast.AST | None) -> bool:
    """``torch.device("cpu")`` or ``"cpu"``."""
    if isinstance(node, ast.Call) and call_name(node) == "device" and len(node.args) == 1:
        node = node.args[0]
    return isinstance(node, ast.Constant) and node.value == "cpu"


def _cpu_only(tree: ast.Module) -> bool:
    """Every device the code names is the CPU (``device = torch.device("cpu")``, the CUDA line left
    commented out, as in teaching scripts): no string, name or attribute names an accelerator, no
    parameter or attribute brings a device from elsewhere, and every ``device`` value is the CPU."""
    saw_cpu = False
    prose = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    callees = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose
                and _ACCEL_WORD.search(node.value)):
            return False  # a docstring saying "uncomment to run on GPU" is prose, not a device
        if isinstance(node, ast.Attribute) and (
                _ACCEL_WORD.search(node.attr) or (node.attr == "device" and id(node) not in callees)):
            return False
        if isinstance(node, ast.Name) and _ACCEL_WORD.search(node.id):
            return False
        if isinstance(node, ast.arg) and "device" in node.arg:
            return False
        if isinstance(node, ast.Call) and call_name(node) == "device":
            if not _cpu_device(node):
                return False
            saw_cpu = True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and "device" in t.id for t in node.targets):
            if not _cpu_device(node.value):
                return False
    return saw_cpu


def build_context(path: str, source: str, tree: ast.Module) -> FileContext:
    """Analyse ``tree`` once: imports, local classes, enclosing frames, name kinds, step loops."""
    # "GPU code": the file names CUDA or NCCL somewhere (a device string, torch.cuda, a backend)
    ctx = FileContext(path=path, source=source, tree=tree, uses_cuda="cuda" in source or "nccl" in source,
                      uses_gpu=bool(_GPU.search(source)),
                      is_test=bool(_TEST_MODULE.match(re.split(r"[\\/]", path)[-1])))
    classes: list[ast.ClassDef] = []
    star: dict[str, str] = {}  # names a star import of a local module brings (its ``import torch``)
    for node in _statements(tree.body):  # imports and classes are statements: skip expressions
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    ctx.imports[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    ctx.imports[top] = top
        elif isinstance(node, ast.ImportFrom) and node.names[0].name == "*":
            star.update(star_imports(path, node.module, node.level))  # ``from utils import *``
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                ctx.imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.ClassDef):
            classes.append(node)
    for name, qual in star.items():
        ctx.imports.setdefault(name, qual)
    if ctx.uses_gpu and _cpu_only(tree):  # names a device, and the only one is the CPU
        ctx.uses_cuda = ctx.uses_gpu = False
    tops = {q.split(".")[0] for q in ctx.imports.values()}
    if "torch" not in tops and tops & _OTHER_FRAMEWORKS:
        ctx.uses_cuda = ctx.uses_gpu = False
        ctx.other_framework = True
    for _ in range(2):  # two rounds resolve a local base class defined after its subclass
        for cls in classes:
            for base in cls.bases:
                q = ctx.qualname(base) or ""
                local = base.id if isinstance(base, ast.Name) else ""
                if q in MODULE_BASES or q.endswith("LightningModule") or local in ctx.module_classes:
                    ctx.module_classes.add(cls.name)
                if q in DATASET_BASES or local in ctx.dataset_classes:
                    ctx.dataset_classes.add(cls.name)
    _Walker(ctx).visit(tree, Where())
    _infer_kinds(ctx)
    # a script named like a test (``test_on_image.py``, ``main_test.py``) that holds no test runs on real files
    name = re.split(r"[\\/]", path)[-1]
    ctx.holds_tests = ctx.is_test and (name == "conftest.py" or bool(tops & {"pytest", "unittest"}) or any(
        isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test") for n in ast.walk(tree)))
    for call, where in ctx.calls:
        if where.loop is not None and (is_backward(call) or is_optimizer_step(call, ctx, where)
                                       or is_helper_step(call, ctx, where)):
            ctx.step_loops.add(where.loop)
    return ctx


def _statements(body: list[ast.stmt]):
    """Every statement under ``body``, nested ones included, without visiting expressions."""
    stack = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        for name in ("handlers", "finalbody", "orelse", "body", "cases"):
            children = getattr(node, name, None)
            if isinstance(children, list):
                stack.extend(reversed(children))


def is_backward(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Attribute) and call.func.attr == "backward"


def is_optimizer_step(call: ast.Call, ctx: FileContext, where: Where) -> bool:
    """``optimizer.step()`` or ``scaler.step(opt)`` — not ``scheduler.step()``."""
    if not isinstance(call.func, ast.Attribute) or call.func.attr != "step":
        return False
    recv = call.func.value
    if ctx.kind(recv, where.func) in ("optimizer", "scaler"):
        return True
    name = last_ident(recv).lower()
    return "sched" not in name and ("optim" in name or name in ("opt", "scaler") or name.endswith("_opt"))


def _optimizer_like(node: ast.AST, ctx: FileContext, where: Where) -> bool:
    if ctx.kind(node, where.func) == "optimizer":
        return True
    name = last_ident(node).lower()
    return "sched" not in name and ("optim" in name or name == "opt" or name.endswith("_opt"))


def is_helper_step(call: ast.Call, ctx: FileContext, where: Where) -> bool:
    """A helper that runs backward and the step: ``loss_scaler(loss, optimizer, parameters=...)``
    (DeiT's/MAE's NativeScaler), i.e. a call given both a loss and an optimizer."""
    args = list(call.args) + [k.value for k in call.keywords]
    has_loss = any(isinstance(a, ast.Name) and "loss" in a.id.lower() for a in args)
    return has_loss and any(_optimizer_like(a, ctx, where) for a in args)


def autocast_state(item: ast.withitem, ctx: FileContext, func: ast.AST | None) -> bool | None:
    """True: the item enters autocast; False: it leaves it (``enabled=False``); None: neither."""
    expr = item.context_expr
    if isinstance(expr, ast.Name):  # ``ctx = nullcontext() if cpu else torch.amp.autocast(...)``
        values = ctx.assigned(expr.id, func)
        return True if any(_has_autocast(v) for v in values) else None
    if isinstance(expr, ast.Call) and call_name(expr) == "autocast":
        enabled = kwarg(expr, "enabled")
        return False if is_const(enabled, False) else True
    return None


def _has_autocast(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and call_name(n) == "autocast" for n in ast.walk(node))


def _is_no_grad(expr: ast.AST, ctx: FileContext) -> bool:
    if isinstance(expr, ast.Call):
        if ctx.qualname(expr.func) == "torch.set_grad_enabled":
            return bool(expr.args) and is_const(expr.args[0], False)
        expr = expr.func
    return ctx.qualname(expr) in NO_GRAD


class _Walker:
    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx

    def visit(self, node: ast.AST, where: Where) -> None:
        ctx = self.ctx
        if isinstance(node, ast.expr) and not isinstance(node, ast.Lambda):  # the common, cheap case
            if isinstance(node, ast.Call):
                ctx.calls.append((node, where))
            for child in ast.iter_child_nodes(node):
                self.visit(child, where)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            ctx.stmts.append((node, where))
        if isinstance(node, _FUNCS):
            for dec in getattr(node, "decorator_list", ()):
                self.visit(dec, where)
            args = node.args
            for default in args.defaults + [d for d in args.kw_defaults if d is not None]:
                self.visit(default, where)
            names = {a.arg for a in args.args + args.posonlyargs + args.kwonlyargs}
            names |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
            ctx.params[node] = names
            ctx.assigns.setdefault(node, {})
            no_grad = any(_is_no_grad(d, ctx) for d in getattr(node, "decorator_list", ()))
            inner = Where(func=node, cls=where.cls, no_grad=no_grad)
            if where.cls is not None:
                ctx.func_cls[node] = where.cls
            body = node.body if isinstance(node.body, list) else [node.body]
            for child in body:
                self.visit(child, inner)
            return
        if isinstance(node, ast.ClassDef):
            for child in node.bases + node.decorator_list:
                self.visit(child, where)
            inner = Where(cls=node)
            for child in node.body:
                self.visit(child, inner)
            return
        if isinstance(node, ast.stmt):  # (function and class statements were recorded above)
            ctx.stmts.append((node, where))
            self._record_assign(node, where)
        if isinstance(node, _LOOPS):
            head = node.iter if isinstance(node, (ast.For, ast.AsyncFor)) else node.test
            self.visit(head, where)
            inner = replace(where, loops=where.loops + (node,), guarded=False)
            for child in node.body + node.orelse:
                self.visit(child, inner)
            return
        if isinstance(node, ast.If):
            self.visit(node.test, where)
            inner = replace(where, guarded=True)
            for child in node.body + node.orelse:
                self.visit(child, inner)
            return
        if isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            for child in node.body + node.finalbody:
                self.visit(child, where)
            handler_where = replace(where, guarded=True, in_except=True)
            for child in node.handlers + node.orelse:
                self.visit(child, handler_where if child in node.handlers else where)
            return
        if isinstance(node, (ast.With, ast.AsyncWith)):
            inner = where
            for item in node.items:
                self.visit(item.context_expr, where)
                if _is_no_grad(item.context_expr, ctx):
                    inner = replace(inner, no_grad=True)
                state = autocast_state(item, ctx, where.func)
                if state is not None:
                    inner = replace(inner, autocast=node if state else None)
            for child in node.body:
                self.visit(child, inner)
            return
        for child in ast.iter_child_nodes(node):
            self.visit(child, where)

    def _record_assign(self, node: ast.stmt, where: Where) -> None:
        scope = self.ctx.assigns.setdefault(where.func, {})
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    scope.setdefault(target.id, []).append(node.value)
                elif (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                      and target.value.id == "self" and where.cls is not None):
                    attrs = self.ctx.attr_assigns.setdefault(where.cls, {})
                    attrs.setdefault(target.attr, []).append((node.value, where.func))
                elif isinstance(target, (ast.Tuple, ast.List)):
                    value = node.value
                    pairs = (zip(target.elts, value.elts) if isinstance(value, (ast.Tuple, ast.List))
                             and len(value.elts) == len(target.elts) else
                             ((elt, ast.Constant(value=None)) for elt in target.elts))
                    for elt, part in pairs:  # ``x, y = x.to(d), y.to(d)`` pairs up element-wise
                        if isinstance(elt, ast.Name):
                            scope.setdefault(elt.id, []).append(part)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            self._record_loop_target(node, scope)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                for n in ast.walk(item.optional_vars) if item.optional_vars else ():
                    if isinstance(n, ast.Name):
                        scope.setdefault(n.id, []).append(ast.Constant(value=None))
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                scope.setdefault(name, []).append(ast.Constant(value=None))

    def _record_loop_target(self, node: ast.For | ast.AsyncFor, scope: dict) -> None:
        target, it = node.target, node.iter
        if isinstance(it, ast.Call) and call_name(it) == "enumerate" and it.args:
            it = it.args[0]
            if isinstance(target, ast.Tuple) and len(target.elts) == 2:
                first, target = target.elts
                if isinstance(first, ast.Name):
                    scope.setdefault(first.id, []).append(ast.Constant(value=None))
        if isinstance(it, ast.Call) and call_name(it) == "tqdm" and it.args:
            it = it.args[0]
        from_loader = isinstance(it, (ast.Name, ast.Attribute)) and "loader" in last_ident(it).lower()
        for n in ast.walk(target):
            if isinstance(n, ast.Name):
                # a tuple unpacked from a DataLoader yields tensors (a dict/list has no .to())
                tensor = from_loader and isinstance(target, ast.Tuple) and n in target.elts
                value = _LOADER_ITEM if tensor else ast.Constant(value=None)
                scope.setdefault(n.id, []).append(value)


_LOADER_ITEM = ast.Constant(value="<loader item>")


def _infer_kinds(ctx: FileContext) -> None:
    order = [None] + [f for f in ctx.assigns if f is not None]
    for func in order:
        kinds: dict[str, str | None] = {}
        ctx.kinds[func] = kinds
        for name, values in ctx.assigns.get(func, {}).items():
            found: set[str | None] = set()
            for value in values:  # in source order, so ``m = m.to(d)`` sees the earlier ``m``
                found.add("tensor" if value is _LOADER_ITEM else ctx.expr_kind(value, func))
                kinds[name] = _join(found)


def _join(found: set[str | None]) -> str | None:
    if len(found) == 1:
        return next(iter(found))
    if None not in found and any(found <= group for group in _COMPATIBLE):
        return "tensor" if "tensor" in found else "module"
    return None
