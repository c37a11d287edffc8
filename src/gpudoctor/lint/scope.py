"""Scope analysis shared by every rule: imports, name kinds, loops, and what encloses each call.

One pass over the tree records, for every call and statement, a :class:`Where`: the enclosing
function and class, the loops around it, whether it runs under ``no_grad``/autocast, and whether
an ``if``/``except`` sits between it and its nearest loop (then it is not "every step"). Rules read
these facts instead of walking the tree again, which keeps a 10k-line tree under a second.

Name kinds (``tensor``, ``module``, ``wrapper``, ``optimizer`` ...) come from assignments in the
same function (or at module level); a name assigned two incompatible ways, or a parameter, has no
kind, and rules stay silent on it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

TENSOR_FACTORIES = frozenset(
    "randn rand randint randperm zeros ones empty full tensor as_tensor from_numpy arange linspace "
    "logspace eye stack cat zeros_like ones_like empty_like full_like rand_like randn_like "
    "normal bernoulli multinomial matmul mm bmm".split()
)
TENSOR_METHODS = frozenset(
    "detach clone contiguous view reshape permute transpose t squeeze unsqueeze flatten "
    "float half double bfloat16 long int bool abs exp log sqrt sum mean softmax".split()
)
WRAPPERS = frozenset({
    "torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
    "torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel",
})
NO_GRAD = frozenset({"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad"})
TIMERS = frozenset({
    "time.time", "time.perf_counter", "time.monotonic", "time.time_ns", "time.perf_counter_ns",
    "time.monotonic_ns", "timeit.default_timer",
})
MODULE_BASES = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})
DATASET_BASES = frozenset({"torch.utils.data.Dataset", "torch.utils.data.IterableDataset",
                           "torch.utils.data.dataset.Dataset"})


@dataclass(frozen=True, eq=False)
class Where:
    """What encloses a node. Built once per frame change and shared by the nodes inside it."""

    func: ast.AST | None = None
    cls: ast.ClassDef | None = None
    loops: tuple[ast.AST, ...] = ()
    no_grad: bool = False
    autocast: ast.With | None = None
    guarded: bool = False  # an if/except/try lies between the node and its nearest loop
    in_except: bool = False

    @property
    def loop(self) -> ast.AST | None:
        return self.loops[-1] if self.loops else None


@dataclass(eq=False)
class FileContext:
    """Everything rules need to know about one parsed file."""

    path: str
    source: str
    tree: ast.Module
    imports: dict[str, str] = field(default_factory=dict)
    module_classes: set[str] = field(default_factory=set)
    dataset_classes: set[str] = field(default_factory=set)
    calls: list[tuple[ast.Call, Where]] = field(default_factory=list)
    stmts: list[tuple[ast.stmt, Where]] = field(default_factory=list)
    kinds: dict[ast.AST | None, dict[str, str | None]] = field(default_factory=dict)
    assigns: dict[ast.AST | None, dict[str, list[ast.AST]]] = field(default_factory=dict)
    params: dict[ast.AST | None, set[str]] = field(default_factory=dict)
    step_loops: set[ast.AST] = field(default_factory=set)
    uses_cuda: bool = False
    uses_gpu: bool = False  # names CUDA, NCCL, torch.accelerator or a device: the code targets a GPU
    torch_floor: tuple[int, ...] | None = None  # the project's declared lowest torch (project.py)
    torch_ceiling: tuple[int, ...] | None = None  # every declared torch is below this (a pin), project.py
    other_framework: bool = False  # imports MXNet/TensorFlow/JAX/... and never torch (walker.py)
    is_test: bool = False  # a test module (test_*.py, *_test(s).py, *-test(s).py, conftest.py): toy data
    holds_tests: bool = False  # a test module that holds tests (test_* functions, pytest/unittest, conftest)
    cv2_threads_elsewhere: bool = False  # another file of the project calls cv2.setNumThreads
    func_cls: dict[ast.AST, ast.ClassDef] = field(default_factory=dict)  # method -> its class
    attr_assigns: dict[ast.ClassDef, dict[str, list[tuple[ast.AST, ast.AST | None]]]] = field(
        default_factory=dict)  # class -> ``self.<attr>`` -> [(value, function assigning it)]
    cache: dict = field(default_factory=dict)  # per-file facts computed lazily by graph.py
    _quals: dict[int, str | None] = field(default_factory=dict)  # id(Attribute) -> qualname

    # ----- names -------------------------------------------------------------------------
    def qualname(self, node: ast.AST) -> str | None:
        """``nn.Linear`` -> ``torch.nn.Linear`` through the file's imports; ``None`` if unknown."""
        if isinstance(node, ast.Name):
            return self.imports.get(node.id)
        if isinstance(node, ast.Attribute):
            key = id(node)
            if key in self._quals:
                return self._quals[key]
            base = self.qualname(node.value)
            qual = self._quals[key] = f"{base}.{node.attr}" if base else None
            return qual
        return None

    def kind(self, node: ast.AST, func: ast.AST | None) -> str | None:
        """The kind of an expression in ``func`` (``None`` when it cannot be decided)."""
        if isinstance(node, ast.Name):
            scope = func if node.id in self.kinds.get(func, {}) or node.id in self.params.get(func, ()) else None
            if node.id in self.params.get(scope, ()):
                return None
            return self.kinds.get(scope, {}).get(node.id)
        return self.expr_kind(node, func)

    def attr_kind(self, node: ast.AST, func: ast.AST | None) -> str | None:
        """The kind of ``self.<attr>`` inside a method, from every ``self.<attr> = ...`` of its class."""
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"):
            return None
        cls = self.func_cls.get(func)
        values = self.attr_assigns.get(cls, {}).get(node.attr) if cls is not None else None
        if not values:
            return None
        key = ("attr", id(cls), node.attr)
        if key not in self.cache:
            self.cache[key] = None  # a self-referencing assignment resolves to "unknown"
            kinds = {self.expr_kind(value, where) for value, where in values}
            self.cache[key] = next(iter(kinds)) if len(kinds) == 1 else None
        return self.cache[key]

    def expr_kind(self, node: ast.AST, func: ast.AST | None) -> str | None:
        if isinstance(node, ast.Name):
            return self.kind(node, func)
        if isinstance(node, ast.Attribute):
            return self.attr_kind(node, func)
        if isinstance(node, ast.BinOp) and not isinstance(node.op, ast.Mod):
            kinds = {self.expr_kind(node.left, func), self.expr_kind(node.right, func)}
            if "cuda_tensor" in kinds:
                return "cuda_tensor"
            return "tensor" if "tensor" in kinds else None
        if not isinstance(node, ast.Call):
            return None
        q = self.qualname(node.func)
        if q:
            last = q.rsplit(".", 1)[-1]
            if q in WRAPPERS:
                return "wrapper"
            if q.startswith("torch.") and q.count(".") == 1 and last in TENSOR_FACTORIES:
                return "cuda_tensor" if any(k.arg == "device" and is_cuda_expr(k.value, self)
                                            for k in node.keywords) else "tensor"
            if q in ("torch.compile",) and node.args:
                return self.expr_kind(node.args[0], func)
            if q.startswith("torch.optim.") and last[:1].isupper() and "lr_scheduler" not in q:
                return "optimizer"
            if last == "GradScaler":
                return "scaler"
            if q in ("torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"):
                return "loader"
            if last == "DistributedSampler":
                return "sampler"
            if q in TIMERS:
                return "timer"
            if (q.startswith("torch.nn.") and last[:1].isupper() and ".functional" not in q
                    and ".utils" not in q and ".init" not in q):
                return "module"
            if q.startswith("torchvision.models.") or q in ("timm.create_model",):
                return "module"
            if q.startswith("transformers.") and last == "from_pretrained" and "Model" in q:
                return "module"
        if isinstance(node.func, ast.Name) and node.func.id in self.module_classes:
            return "module"
        if isinstance(node.func, ast.Attribute):
            recv = self.expr_kind(node.func.value, func)
            meth = node.func.attr
            if recv in ("module", "wrapper") and meth in ("to", "cuda", "cpu", "float", "half", "train", "eval"):
                return recv
            if recv in ("tensor", "cuda_tensor"):
                if meth == "cuda" or (meth == "to" and node.args and is_cuda_expr(node.args[0], self)):
                    return "cuda_tensor"
                if meth in ("cpu", "numpy"):
                    return "tensor" if meth == "cpu" else None
                if meth in TENSOR_METHODS or meth == "to":
                    return recv
        return None

    def assigned(self, name: str, func: ast.AST | None) -> list[ast.AST]:
        """The value expressions assigned to ``name`` in ``func`` (or at module level)."""
        scope = func if name in self.assigns.get(func, {}) else None
        return self.assigns.get(scope, {}).get(name, [])


def is_cuda_expr(node: ast.AST, ctx: FileContext | None = None) -> bool:
    """True when ``node`` plainly names a CUDA device: ``"cuda"``, ``"cuda:0"``, ``torch.device("cuda")``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.startswith("cuda")
    if isinstance(node, ast.Call) and node.args and isinstance(node.func, (ast.Attribute, ast.Name)):
        name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        return name == "device" and is_cuda_expr(node.args[0], ctx)
    if isinstance(node, ast.JoinedStr) and node.values:
        first = node.values[0]
        return isinstance(first, ast.Constant) and str(first.value).startswith("cuda")
    return False


def call_name(call: ast.Call) -> str | None:
    """The bare name of what is called: ``x.to(...)`` -> ``to``, ``print(...)`` -> ``print``."""
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    if isinstance(call.func, ast.Name):
        return call.func.id
    return None


def last_ident(node: ast.AST) -> str:
    """``self.optimizer`` -> ``optimizer``; ``opt`` -> ``opt``; anything else -> ``""``."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def kwarg(call: ast.Call, name: str) -> ast.expr | None:
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return None


def has_star_kwargs(call: ast.Call) -> bool:
    return any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args)


def is_const(node: ast.AST | None, value: object) -> bool:
    return isinstance(node, ast.Constant) and node.value is value or (
        isinstance(node, ast.Constant) and type(node.value) is type(value) and node.value == value)
