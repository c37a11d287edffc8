import os
from dataclasses import dataclass, field


@dataclass
class Config:
    image_size: int = 320
    channels: int = 3
    num_classes: int = 100
    batch_size: int = 384
    pool_batches: int = 3          # distinct synthetic batches kept in host memory
    width: int = 96
    lr: float = 2e-3
    weight_decay: float = 0.05
    warmup_steps: int = 20
    log_every: int = 50
    seed: int = 0
    mean: tuple = (0.485, 0.456, 0.406)
    std: tuple = (0.229, 0.224, 0.225)

    @classmethod
    def from_env(cls) -> "Config":
        cfg = cls()
        if os.environ.get("SMOKE") == "1":
            cfg.image_size = 32
            cfg.batch_size = 4
            cfg.pool_batches = 2
            cfg.width = 16
            cfg.log_every = 1
        return cfg
