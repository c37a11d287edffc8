"""``gpudoctor.train``: the training engine with every fix applied, and its building blocks.

``Trainer(model, optimizer, loss_fn, config=TrainConfig(...)).fit(loader, epochs=..., val_loader=...)``;
for a loop of your own, ``Engine`` gives the same pieces in Fabric's style (``setup``,
``forward_loss``, ``backward``, ``clip_and_step``, ``save``/``load_newest``), and ``move_to_device``,
``fast_loader``, ``CudaPrefetcher``, ``GpuLoader``, ``Precision`` work on their own. See ``docs/train.md``.
"""

from gpudoctor.train import presets
from gpudoctor.train.config import (
    CheckpointConfig,
    LogConfig,
    ParallelConfig,
    PerfConfig,
    PrecisionConfig,
    RobustConfig,
    TrainConfig,
)
from gpudoctor.train.collate import normalize_on_device, uint8_collate
from gpudoctor.train.data import ResumableSampler, fast_loader, move_to_device
from gpudoctor.train.engine import Engine
from gpudoctor.train.events import JsonlObserver, Observer
from gpudoctor.train.gpu_loader import NO_AUGMENT, GpuAugment, GpuLoader
from gpudoctor.train.loop import Trainer
from gpudoctor.train.metrics import FitResult
from gpudoctor.train.precision import Precision
from gpudoctor.train.prefetch import CudaPrefetcher
from gpudoctor.train.scalars import ScalarsObserver
from gpudoctor.train.stops import NonFiniteLossError

__all__ = [
    "NO_AUGMENT",
    "CheckpointConfig",
    "CudaPrefetcher",
    "Engine",
    "FitResult",
    "GpuAugment",
    "GpuLoader",
    "JsonlObserver",
    "LogConfig",
    "NonFiniteLossError",
    "Observer",
    "ParallelConfig",
    "PerfConfig",
    "Precision",
    "PrecisionConfig",
    "ResumableSampler",
    "RobustConfig",
    "ScalarsObserver",
    "TrainConfig",
    "Trainer",
    "fast_loader",
    "move_to_device",
    "normalize_on_device",
    "presets",
    "uint8_collate",
]
