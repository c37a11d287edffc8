"""GD503: deterministic cuDNN/algorithms switched on in a training script (information)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from gpudoctor.lint.project import project_mentions
from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, is_const

CODE = "GD503"
NAME = "cudnn-deterministic"
SEVERITY = "info"
FIXABLE = False
MESSAGE = "deterministic cuDNN is on: reproducible but slower convolutions; keep it for debugging runs only"
RATIONALE = (
    "`torch.backends.cudnn.deterministic = True` (and `torch.use_deterministic_algorithms(True)`,"
    " or `torch.backends.cudnn.enabled = False`) restrict cuDNN to deterministic kernels, which "
    "are often slower, and disable the autotuner's fastest choices. That is right for a "
    "reproducibility or debugging run, and a cost in a production training run. Reported as "
    "information, only in files that contain a training loop, and not in test modules "
    "(`test_*.py`, `*_test.py`, `conftest.py`): a test that compares numerics is such a "
    "reproducibility run. `cudnn.deterministic` alone only selects convolution algorithms (PyTorch's "
    "documentation of the flag), so it is not reported in a self-contained file whose models "
    "have no convolution (it defines its nn.Module classes, names no Conv layer or conv "
    "function, imports no model library, and whatever it imports from its own project names "
    "none either): a bag-of-words, RNN or transformer notebook pays nothing for it."
)
BAD = "torch.backends.cudnn.deterministic = True\n"
GOOD = "torch.backends.cudnn.benchmark = True  # production run: let cuDNN pick the fastest kernels\n"


# Where a convolution can come from without the file naming one: model zoos, and loaders of whole
# models. Any of these keeps the rule on (the model may well be convolutional).
_CONV = re.compile(r"Conv|conv[123]d|conv_transpose|ctc_loss|CTCLoss")
_ZOOS = frozenset({
    "torchvision", "timm", "transformers", "diffusers", "segmentation_models_pytorch", "ultralytics",
    "monai", "mmcv", "mmdet", "mmseg", "mmpretrain", "mmengine", "detectron2", "torchaudio", "kornia",
    "open_clip", "clip", "pretrainedmodels", "efficientnet_pytorch", "lightning", "pytorch_lightning",
})
_LOADERS = ("hub.load", "jit.load", "from_pretrained", "load_model")
_PROJECT_CONV = ("Conv", "conv1d", "conv2d", "conv3d", "conv_transpose")


def _imported_tops(tree: ast.Module) -> tuple[set[str], bool]:
    """Top-level module names the file imports anywhere, and whether it has a relative import."""
    tops: set[str] = set()
    relative = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            tops.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                relative = True
            elif node.module:
                tops.add(node.module.split(".")[0])
    return tops, relative


_ROOT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")


def _is_local(path: str, top: str) -> bool:
    """Whether ``top`` is a module or package of the file's own folder or of a folder above it, up
    to the project root (the nearest folder with ``.git``/``pyproject.toml``/``setup.*``)."""
    if not path or path == "-":
        return False
    try:
        folder = Path(path).resolve().parent
    except (OSError, RuntimeError):
        return True
    for up in (folder, *folder.parents):
        if (up / f"{top}.py").is_file() or (up / top).is_dir():
            return True
        if any((up / marker).exists() for marker in _ROOT_MARKERS):
            return False
    return False


def _no_convolution(ctx: FileContext) -> bool:
    """The file's models are its own and none has a convolution: the deterministic flag is free."""
    if not ctx.module_classes or _CONV.search(ctx.source) or any(k in ctx.source for k in _LOADERS):
        return False
    tops, relative = _imported_tops(ctx.tree)
    if tops & _ZOOS:
        return False
    if relative or any(_is_local(ctx.path, top) for top in tops - {"torch"}):
        return not any(project_mentions(ctx.path, needle) for needle in _PROJECT_CONV)
    return True


def check(ctx: FileContext) -> Iterator[Hit]:
    if ctx.is_test or not ctx.step_loops or ("determinis" not in ctx.source and "cudnn" not in ctx.source):
        return
    for stmt, where in ctx.stmts:
        if where.guarded:
            continue  # behind ``if args.deterministic:``/``if seed is not None:``: the user opts in
        if isinstance(stmt, ast.Assign) and is_const(stmt.value, True):
            if any(ctx.qualname(t) == "torch.backends.cudnn.deterministic" for t in stmt.targets):
                if not _no_convolution(ctx):
                    yield Hit(stmt)
        elif isinstance(stmt, ast.Assign) and is_const(stmt.value, False):
            if any(ctx.qualname(t) == "torch.backends.cudnn.enabled" for t in stmt.targets):
                yield Hit(stmt, "cuDNN is disabled: convolutions and RNNs fall back to much slower "
                                "kernels; keep it for debugging runs only")
    for call, where in ctx.calls:
        if where.guarded:
            continue
        if ctx.qualname(call.func) == "torch.use_deterministic_algorithms" and call.args:
            if is_const(call.args[0], True):
                yield Hit(call, "`torch.use_deterministic_algorithms(True)`: reproducible but slower "
                                "kernels; keep it for debugging runs only")
