"""gpudoctor: find out why PyTorch training on NVIDIA GPUs is slow, runs out of memory, produces
NaN or hangs under DDP — measured, explained in plain words, and fixed.

Importing this package is cheap: it does not import torch, initialise CUDA or load NVML.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
