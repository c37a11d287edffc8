"""GD103: ``.numpy()`` on a CUDA tensor without ``.cpu()``."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext

CODE = "GD103"
NAME = "numpy-on-cuda-tensor"
SEVERITY = "error"
FIXABLE = False
MESSAGE = "`.numpy()` on a CUDA tensor raises TypeError: call `.detach().cpu().numpy()`"
RATIONALE = (
    "NumPy arrays live in host memory, so `Tensor.numpy()` on a CUDA tensor raises 'can't convert"
    " cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory "
    "first'. The rule fires only when the tensor is known to be on the GPU (made by `.cuda()`, "
    "`.to(\"cuda\")` or a factory with `device=\"cuda\"`)."
)
BAD = "x = torch.randn(4, device=\"cuda\")\narr = x.numpy()\n"
GOOD = "x = torch.randn(4, device=\"cuda\")\narr = x.detach().cpu().numpy()\n"


def check(ctx: FileContext) -> Iterator[Hit]:
    for call, where in ctx.calls:
        if isinstance(call.func, ast.Attribute) and call.func.attr == "numpy" and not call.args:
            if ctx.kind(call.func.value, where.func) == "cuda_tensor":
                yield Hit(call)
