from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore


@dataclass
class DataConfig:
    root: str = "/datasets/cityscapes"
    crop: int = 768
    batch_size: int = 8
    workers: int = 8


@dataclass
class OptimConfig:
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 1e-4


@dataclass
class SegConfig:
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    num_classes: int = 19
    epochs: int = 120
    log_every: int = 50
    out_dir: str = "checkpoints"


cs = ConfigStore.instance()
cs.store(name="seg", node=SegConfig)
