"""gpudoctor: find out why PyTorch training on NVIDIA GPUs is slow, runs out of memory, produces
NaN or hangs under DDP — measured, explained in plain words, and fixed.

Importing this package is cheap: it does not import torch, initialise CUDA or load NVML.
``gpudoctor.watch`` (in-process diagnosis, :mod:`gpudoctor.watching`) is loaded on first use.
"""

from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "watch"]


def __getattr__(name: str) -> Any:
    if name == "watch":
        # Lazy, and by name: `import gpudoctor` (which every module does for __version__) must
        # not load the probes, torch or the report; the layers see gpudoctor.watching on its own.
        import importlib

        return importlib.import_module("gpudoctor.watching").watch
    raise AttributeError(f"module 'gpudoctor' has no attribute {name!r}")
