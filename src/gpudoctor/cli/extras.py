"""Which commands need an optional extra, and what to say when it is missing.

The core install (``pip install gpudoctor``) has no torch: lint, explain, monitor, diagnose,
report and the non-torch layers of check run without it. The commands below need the ``torch``
extra; without torch they exit 2 with :func:`missing_torch_message`, before doing anything.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

# command path -> why it needs torch (shown nowhere; kept so the list is reviewable)
TORCH_COMMANDS: dict[str, str] = {
    "run": "its probes hook torch's optimizer, DataLoader and profiler inside the script",
    "doctor": "runs a training script (or the embedded torch workload) under run's probes",
    "memory estimate": "builds the model and trains two small batches",
    "memory run": "records torch's CUDA allocator while the script trains",
    "tune": "measures real training steps per setting",
    "fix": "runs and measures the script under run's probes",
    "bench": "times matmuls, copies, collectives and a DataLoader with torch",
}

TORCH_EXTRA = "gpudoctor[torch]"
# The PyTorch project's own wheel index: CPU-only and per-CUDA-version builds of torch.
TORCH_INDEX = "https://download.pytorch.org/whl"


def has_torch() -> bool:
    """Whether ``import torch`` can find torch here, without importing it."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # a blocked or half-removed torch
        return False


def missing_torch_message(command: str) -> str:
    """What to do when ``command`` needs torch and there is none."""
    return (
        f"`gpudoctor {command}` needs PyTorch, and this Python has no torch.\n"
        f"Install gpudoctor's torch extra:  pip install '{TORCH_EXTRA}'  (from a checkout: "
        "pip install '.[torch]').\n"
        "That brings the newest CUDA build of torch, for recent NVIDIA drivers. For a CPU-only "
        "torch, or one for an older driver, install torch from the PyTorch index first, then the "
        "extra:\n"
        f"  pip install torch --index-url {TORCH_INDEX}/cpu\n"
        f"  pip install torch --index-url {TORCH_INDEX}/cu126   (CUDA 12.6; nvidia-smi shows the "
        "highest CUDA version your driver supports)\n"
        "lint, explain, monitor, diagnose, report and check work without torch."
    )


def _guarded(callback: Any, command: str) -> Any:
    @functools.wraps(callback)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not has_torch():
            from gpudoctor.errors import GpuDoctorUserError

            raise GpuDoctorUserError(missing_torch_message(command))
        return callback(*args, **kwargs)

    return wrapper


def guard_torch_commands(group: Any, prefix: str = "") -> None:
    """Make each command of :data:`TORCH_COMMANDS` under the click ``group`` check for torch when
    it is invoked (after its options are parsed, so ``--help`` still works without torch)."""
    for name, command in getattr(group, "commands", {}).items():
        path = f"{prefix}{name}"
        if path in TORCH_COMMANDS and command.callback is not None:
            command.callback = _guarded(command.callback, path)
        guard_torch_commands(command, f"{path} ")
