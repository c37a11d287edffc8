"""Example training scripts: one tuned baseline and one per planted problem.

Each module is a stand-alone script that imports only torch (it stands for a user's script) and
runs as ``python -m gpudoctor.workloads.<name> [--size tiny|small|medium] [--steps N]`` on a GPU
when one is available, else on the CPU. Data is synthetic and in memory. ``WORKLOADS`` says what
each one plants, so tests and ``benchmarks/run_verdicts.py`` know which finding must come first.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """One example script.

    Attributes:
        name: module name under ``gpudoctor.workloads``.
        description: what it does, in one line.
        planted: the finding code that must rank first, ``None`` for the clean baseline (which
            must get no WARN/ERROR finding).
        nproc: processes to start under torchrun; 1 means plain ``python -m``.
        min_gpus: GPUs needed to show the planted problem (0: it shows on the CPU too).
    """

    name: str
    description: str
    planted: str | None
    nproc: int = 1
    min_gpus: int = 1

    @property
    def module(self) -> str:
        return f"gpudoctor.workloads.{self.name}"

    def argv(self, *, size: str = "small", steps: int | None = None, python: str = "python3",
             nproc: int | None = None) -> list[str]:
        """The command line that runs it (torchrun for multi-process workloads)."""
        n = self.nproc if nproc is None else nproc
        if n > 1 or self.name.startswith("ddp_") or self.name == "straggler":
            cmd = [python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}",
                   "-m", self.module]
        else:
            cmd = [python, "-m", self.module]
        cmd += ["--size", size]
        if steps is not None:
            cmd += ["--steps", str(steps)]
        return cmd


_ALL = (
    Workload(name="clean", planted=None, min_gpus=0,
             description="tuned CNN baseline: workers+pin, non_blocking, bf16, channels_last"),
    Workload(name="basic_user", planted="GD-RUN-DATALOADER", min_gpus=0,
             description="CIFAR-style loop with defaults: num_workers=0, per-sample CPU augmentation"),
    Workload(name="pageable_copies", planted="GD-RUN-H2D-PAGEABLE",
             description="batches sliced from unpinned RAM and copied with blocking .to()"),
    Workload(name="cuda_in_getitem", planted="GD-RUN-H2D-PER-SAMPLE",
             description=".cuda() inside Dataset.__getitem__: one tiny copy per sample"),
    Workload(name="item_every_step", planted="GD-RUN-HOST-SYNC",
             description="loss.item() and .cpu() every step stall the host"),
    Workload(name="fp32_convnet", planted="GD-RUN-FP32-COMPUTE",
             description="compute-bound ResNet-style CNN in plain fp32"),
    Workload(name="leaky_loss", planted="GD-RUN-MEM-LEAK",
             description="loss and logits kept with their autograd graph across steps"),
    Workload(name="tiny_batch", planted="GD-RUN-LAUNCH-BOUND",
             description="batch size 8: tiny kernels, GPU idle between launches"),
    Workload(name="fragmentation", planted="GD-RUN-FRAGMENTATION",
             description="variable-sized activations under a memory cap: allocator retries"),
    Workload(name="nan_loss", planted="GD-RUN-NONFINITE-LOSS", min_gpus=0,
             description="learning rate far too high: the loss becomes inf, then NaN"),
    Workload(name="scaler_collapse", planted="GD-RUN-SCALER-COLLAPSE", min_gpus=0,
             description="fp16 + GradScaler with an inf gradient every step: the scale collapses"),
    Workload(name="ddp_no_set_epoch", planted="GD-RUN-NO-SET-EPOCH", nproc=2, min_gpus=0,
             description="DDP with a DistributedSampler and no set_epoch()"),
    Workload(name="ddp_all_on_gpu0", planted="GD-RUN-SAME-GPU", nproc=2, min_gpus=1,
             description="DDP without torch.cuda.set_device: every rank on GPU 0 (gloo)"),
    Workload(name="straggler", planted="GD-RUN-STRAGGLER", nproc=2, min_gpus=2,
             description="DDP where one rank sleeps every step; the others wait for it"),
)

WORKLOADS: dict[str, Workload] = {w.name: w for w in _ALL}

__all__ = ["WORKLOADS", "Workload"]
