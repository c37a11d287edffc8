"""The job `benchmarks/tune_resnet18.py` and `benchmarks/tune_ddp.py` tune: the seeds' basic user.

ResNet-18 (``benchmarks/models.py``: 3x3 stem, no max-pool) on 32x32 images, 50k in-memory uint8
images with per-sample CPU augmentation (``common.CifarStyle``), SGD, the engine's defaults
(``TrainConfig(batch_size=128)``). ``gpudoctor tune --target benchmarks/tune_job.py:target`` loads
it (``benchmarks/tune_resnet18.py:target`` is the same object). The environment sets it up, so
that trial child processes and torchrun ranks build the same job: ``TUNE_BENCH_SMOKE=1`` swaps in
a tiny CNN with a simulated memory limit (a real ``torch.OutOfMemoryError`` above 200 samples);
``TUNE_BENCH_IMAGES``, ``TUNE_BENCH_EVAL_IMAGES`` and ``TUNE_BENCH_BATCH`` size it.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import CifarStyle  # noqa: E402
from models import resnet18_cifar  # noqa: E402

from gpudoctor.train import LogConfig, TrainConfig  # noqa: E402
from gpudoctor.tune.target import LoaderSettings, TuneTarget  # noqa: E402

REF = f"{Path(__file__).resolve()}:target"
SMOKE = os.environ.get("TUNE_BENCH_SMOKE") == "1"  # an env var: child processes and torchrun ranks see it
IMAGES = int(os.environ.get("TUNE_BENCH_IMAGES", "1024" if SMOKE else "50000"))
EVAL_IMAGES = int(os.environ.get("TUNE_BENCH_EVAL_IMAGES", "256" if SMOKE else "10000"))
BASE_BATCH = int(os.environ.get("TUNE_BENCH_BATCH", "128"))
SMOKE_LIMIT = 200  # --smoke: the simulated memory limit, in samples


class SmokeNet(nn.Module):
    """--smoke only: a tiny CNN that raises a real ``torch.OutOfMemoryError`` for a batch above
    ``SMOKE_LIMIT`` samples (twice that in eval), so the limit steps have a boundary on a CPU."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, 2, 1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        limit = SMOKE_LIMIT if self.training else 2 * SMOKE_LIMIT
        if x.shape[0] > limit:
            raise torch.OutOfMemoryError(f"simulated (--smoke): batch {x.shape[0]} > {limit}")
        return self.fc(F.adaptive_avg_pool2d(F.relu(self.bn(self.conv(x))), 1).flatten(1))


def model_factory() -> nn.Module:
    return SmokeNet() if SMOKE else resnet18_cifar()


def sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)


_DATA: dict[str, Dataset] = {}


def make_target(batch: int = BASE_BATCH) -> TuneTarget:
    """The basic user's job with the engine's defaults at a per-device ``batch``."""
    if not _DATA:
        _DATA["train"] = CifarStyle(IMAGES, seed=0)
        _DATA["eval"] = CifarStyle(EVAL_IMAGES, seed=1, augment=False)
    return TuneTarget(model_factory=model_factory, optimizer_factory=sgd, loss_fn=nn.CrossEntropyLoss(),
                      train_dataset=_DATA["train"], eval_dataset=_DATA["eval"],
                      config=TrainConfig(batch_size=batch), loader=LoaderSettings())


def target() -> TuneTarget:
    """What ``gpudoctor tune --target benchmarks/tune_job.py:target`` (or ``tune_resnet18.py:target``) loads."""
    return make_target()


_FLOPS: list[float | None] = []


def flops_per_sample() -> float | None:
    """Counted once on a 2-sample CPU batch and given to every trainer here: the engine would
    otherwise count them on the first step of every ``fit`` (an extra forward and backward inside
    the timed epoch)."""
    if not _FLOPS:
        from gpudoctor.train.metrics import count_flops

        ds = make_target().train_dataset
        x, y = (torch.stack(v) for v in zip(*(ds[i] for i in range(2))))
        model = model_factory()
        _FLOPS.append(count_flops(lambda: nn.CrossEntropyLoss()(model(x), y).backward()) / 2 or None)
    return _FLOPS[0]


def quiet(config: TrainConfig) -> TrainConfig:
    return config.replace(log=LogConfig(progress_bar=False, every_steps=10_000, flops_per_sample=flops_per_sample()))


def env_facts() -> dict:
    return {"torch": torch.__version__, "python": platform.python_version(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "gpus_visible": torch.cuda.device_count(), "cpus": os.cpu_count(), "smoke": SMOKE}


def setup_facts() -> dict:
    return {"model": "tiny CNN, simulated limit (--smoke)" if SMOKE else "ResNet-18 CIFAR variant (benchmarks/models.py)",
            "images": IMAGES, "eval_images": EVAL_IMAGES,
            "augmentation": "per-sample CPU: reflect pad 4 + random crop 32, flip, normalise",
            "optimizer": "SGD lr 0.1 momentum 0.9 nesterov wd 5e-4",
            "engine_defaults": f"TrainConfig(batch_size={BASE_BATCH}), fast_loader defaults"}


def command_line() -> str:
    launcher = "torchrun --standalone --nproc_per_node 2 " if os.environ.get("WORLD_SIZE", "1") != "1" else "python "
    return "PYTHONPATH=src " + launcher + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]])


def reexec_for_smoke(smoke: bool) -> None:
    """--smoke: start again with TUNE_BENCH_SMOKE=1 (the target is built from the environment, so
    trial child processes and torchrun ranks build the same one)."""
    if smoke and not SMOKE:
        os.environ["TUNE_BENCH_SMOKE"] = "1"
        os.execv(sys.executable, [sys.executable, *sys.argv])
