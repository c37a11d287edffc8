"""GD604: ``torch.save(model)`` pickles the whole ``nn.Module`` instead of its ``state_dict``."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.calls import imported_def
from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext

CODE = "GD604"
NAME = "save-whole-module"
SEVERITY = "warning"
FIXABLE = False
MESSAGE = "`torch.save(model)` pickles the whole module: save `model.state_dict()` and rebuild the model to load it"
RATIONALE = (
    "Saving an `nn.Module` itself pickles a reference to its class, by module path, together with "
    "the tensors. The checkpoint then loads only where the same code sits at the same import path, "
    "breaks when the class is renamed or moved, and since PyTorch 2.6 `torch.load` refuses it by "
    "default (`weights_only=True`). Save `model.state_dict()` (inside a dict with the optimizer "
    "state and epoch for a resume) and load it into a freshly built model. The rule fires only "
    "when the saved name plainly holds a module: built from `torch.nn`, torchvision, timm, "
    "transformers' `from_pretrained`, a `nn.Module` subclass of the file, or one imported from a sibling module "
    "(`from model import Net`); parameters and names "
    "assigned other values are left alone, and so are `torch.jit.save` and `torch.export`."
)
BAD = "model = nn.Sequential(nn.Linear(8, 8)).cuda()\ntorch.save(model, \"model.pt\")\n"
GOOD = "model = nn.Sequential(nn.Linear(8, 8)).cuda()\ntorch.save(model.state_dict(), \"model.pt\")\n"


def check(ctx: FileContext) -> Iterator[Hit]:
    for call, where in ctx.calls:
        if ctx.qualname(call.func) != "torch.save" or not call.args:
            continue
        saved = call.args[0]
        if ctx.kind(saved, where.func) in ("module", "wrapper") or _imported_module(ctx, saved, where.func):
            yield Hit(call)


def _built_from(value: ast.AST) -> str | None:
    """``Net(...)``, ``Net(...).to(device)``, ``Net(...).cuda()``: the class name called."""
    while (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
           and value.func.attr in ("to", "cuda", "float", "half", "train", "eval")):
        value = value.func.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        return value.func.id
    return None


def _imported_module(ctx: FileContext, saved: ast.AST, func: object) -> bool:
    """Every value of the saved name is built from an ``nn.Module`` subclass of a sibling module
    (``from model import Net`` then ``model = Net().to(device)``)."""
    if not isinstance(saved, ast.Name) or saved.id in ctx.params.get(func, ()):
        return False
    values = ctx.assigned(saved.id, func)
    if not values:
        return False
    for value in values:
        name = _built_from(value)
        found = imported_def(ctx, name) if name else None
        if found is None or not isinstance(found[0], ast.ClassDef) or found[0].name not in found[1].module_classes:
            return False
    return True
