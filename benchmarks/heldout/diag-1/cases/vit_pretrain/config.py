import os
from dataclasses import dataclass


@dataclass
class Config:
    image_size: int = 224
    patch: int = 16
    dim: int = 384
    depth: int = 12
    heads: int = 6
    mlp_ratio: float = 4.0
    num_classes: int = 1000
    batch_size: int = 256
    lr: float = 1e-3
    weight_decay: float = 0.05
    warmup: int = 100
    label_smoothing: float = 0.1
    steps: int = 300
    log_every: int = 50
    seed: int = 0

    def __post_init__(self):
        if os.environ.get("SMOKE") == "1":
            self.image_size, self.dim, self.depth, self.heads, self.batch_size = 32, 48, 2, 2, 4
