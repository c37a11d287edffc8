"""GD604: ``torch.save(model)`` pickles the whole ``nn.Module`` instead of its ``state_dict``."""

from __future__ import annotations

from collections.abc import Iterator

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
    "transformers' `from_pretrained` or a `nn.Module` subclass of the file; parameters and names "
    "assigned other values are left alone, and so are `torch.jit.save` and `torch.export`."
)
BAD = "model = nn.Sequential(nn.Linear(8, 8)).cuda()\ntorch.save(model, \"model.pt\")\n"
GOOD = "model = nn.Sequential(nn.Linear(8, 8)).cuda()\ntorch.save(model.state_dict(), \"model.pt\")\n"


def check(ctx: FileContext) -> Iterator[Hit]:
    for call, where in ctx.calls:
        if ctx.qualname(call.func) != "torch.save" or not call.args:
            continue
        saved = call.args[0]
        if ctx.kind(saved, where.func) in ("module", "wrapper"):
            yield Hit(call)
