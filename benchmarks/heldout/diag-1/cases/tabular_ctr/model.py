import torch
from torch import nn


class ResidualMLPBlock(nn.Module):
    def __init__(self, width, expansion, layer_scale_init):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, expansion * width)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(expansion * width, width)
        self.gamma = nn.Parameter(torch.full((width,), layer_scale_init))

    def forward(self, x):
        return x + self.gamma * self.fc2(self.act(self.fc1(self.norm(x))))


class DeepCTR(nn.Module):
    """Shared embedding table with per-field offsets, followed by a deep residual MLP."""

    def __init__(self, data_cfg, model_cfg):
        super().__init__()
        card = torch.tensor(data_cfg.cardinalities)
        self.register_buffer("offsets", torch.cumsum(card, 0) - card, persistent=False)
        self.embedding = nn.Embedding(int(card.sum()), model_cfg.emb_dim)
        in_dim = len(data_cfg.cardinalities) * model_cfg.emb_dim + data_cfg.num_dense
        self.input_proj = nn.Linear(in_dim, model_cfg.width)
        self.blocks = nn.Sequential(*[
            ResidualMLPBlock(model_cfg.width, model_cfg.expansion, model_cfg.layer_scale_init)
            for _ in range(model_cfg.depth)
        ])
        self.norm = nn.LayerNorm(model_cfg.width)
        self.head = nn.Linear(model_cfg.width, 1)

    def forward(self, dense, sparse):
        e = self.embedding(sparse + self.offsets).flatten(1)
        x = self.input_proj(torch.cat([e, dense], dim=1))
        return self.head(self.norm(self.blocks(x))).squeeze(-1)
