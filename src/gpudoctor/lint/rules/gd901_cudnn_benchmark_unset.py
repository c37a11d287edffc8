"""GD901 (off by default): a convolutional net trained on the GPU without cuDNN autotuning."""

from __future__ import annotations

from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext

CODE = "GD901"
NAME = "cudnn-benchmark-unset"
SEVERITY = "info"
FIXABLE = False
MESSAGE = "convolutions trained on the GPU without `torch.backends.cudnn.benchmark = True`"
RATIONALE = (
    "With fixed input shapes, `torch.backends.cudnn.benchmark = True` lets cuDNN time its "
    "convolution algorithms on the first batches and keep the fastest; left unset it uses a "
    "heuristic choice that can be markedly slower. With shapes that change every batch the "
    "autotuning repeats and costs time, which is why the rule is off by default (`--select "
    "GD901`)."
)
BAD = "model = nn.Sequential(nn.Conv2d(3, 64, 3), nn.ReLU()).cuda()\n"
GOOD = "torch.backends.cudnn.benchmark = True\nmodel = nn.Sequential(nn.Conv2d(3, 64, 3), nn.ReLU()).cuda()\n"


def check(ctx: FileContext) -> Iterator[Hit]:
    if not ctx.uses_cuda or not ctx.step_loops or "cudnn.benchmark" in ctx.source:
        return
    for call, _ in ctx.calls:
        qual = ctx.qualname(call.func) or ""
        if qual.startswith("torch.nn.Conv") or qual.startswith("torchvision.models."):
            yield Hit(call)
            return
