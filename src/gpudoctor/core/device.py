"""Device selection: this rank's GPU from ``LOCAL_RANK``, or the CPU when no GPU is usable."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudoctor.core.dist import DistEnv, dist_env

if TYPE_CHECKING:  # pragma: no cover
    import torch


def select_device(prefer: str = "auto", env: DistEnv | None = None) -> torch.device:
    """Pick the device for this process.

    Args:
        prefer: ``"auto"`` (this rank's GPU if CUDA works, else the CPU), ``"cuda"`` (fail if no
            GPU), ``"cpu"``, or an explicit ``"cuda:N"``.
        env: the torchrun environment; read from ``os.environ`` when omitted.

    Raises:
        ValueError: ``prefer`` asks for a GPU that is not there, with what to check.
    """
    import torch

    env = env or dist_env()
    if prefer == "cpu":
        return torch.device("cpu")
    if prefer not in ("auto", "cuda") and not prefer.startswith("cuda:"):
        raise ValueError(f"device {prefer!r} is not one of auto, cuda, cuda:N, cpu")
    if not torch.cuda.is_available():
        if prefer == "auto":
            return torch.device("cpu")
        raise ValueError(
            f"device {prefer!r} was asked for but CUDA is not available "
            f"(torch {torch.__version__}); run `gpudoctor check` to see which layer is missing"
        )
    count = torch.cuda.device_count()
    index = int(prefer.split(":", 1)[1]) if ":" in prefer else env.local_rank
    if index >= count:
        raise ValueError(
            f"GPU {index} was asked for (LOCAL_RANK={env.local_rank}) but only {count} are visible; "
            "check CUDA_VISIBLE_DEVICES and --nproc_per_node"
        )
    return torch.device("cuda", index)
