"""What the GPU test tier (``pytest -m gpu``, run on a device machine) shares."""

from __future__ import annotations

import pytest


def need_gpu() -> None:
    """Skip the calling test where torch sees no CUDA GPU."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
