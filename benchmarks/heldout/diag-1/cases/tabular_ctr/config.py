import os
from dataclasses import dataclass, field


@dataclass
class DataConfig:
    num_dense: int = 13
    cardinalities: tuple = (1460, 583, 10131, 2202, 305, 24, 12517, 633, 3, 9345, 5683, 8351, 3194,
                            27, 14992, 5461, 10, 5652, 2173, 4, 7046, 18, 15, 2862, 105, 1422)
    batch_size: int = 12288
    pool_batches: int = 8


@dataclass
class ModelConfig:
    emb_dim: int = 32
    width: int = 512
    depth: int = 64
    expansion: int = 2
    layer_scale_init: float = 0.1


@dataclass
class OptimConfig:
    lr: float = 1e-3
    weight_decay: float = 0.02
    kwargs: dict = field(default_factory=lambda: {"betas": (0.9, 0.999), "eps": 1e-8, "foreach": False})
    warmup_steps: int = 200


@dataclass
class TrainConfig:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    steps: int = 300
    log_every: int = 100
    seed: int = 17

    @classmethod
    def default(cls):
        cfg = cls()
        if os.environ.get("SMOKE") == "1":
            cfg.data.batch_size, cfg.data.pool_batches = 32, 2
            cfg.model.width, cfg.model.depth, cfg.model.emb_dim = 32, 4, 4
        return cfg
