import torch
import torch.nn as nn


class FeatureSpec:
    """Named dense features as served by the feature store: name -> width."""

    def __init__(self, n_scalar=96, n_vector=32, vector_width=8):
        self.widths = {f"num_{i:03d}": 1 for i in range(n_scalar)}
        self.widths.update({f"vec_{i:03d}": vector_width for i in range(n_vector)})

    @property
    def names(self):
        return list(self.widths)

    @property
    def total_width(self):
        return sum(self.widths.values())


class CTRModel(nn.Module):
    def __init__(self, spec, hidden=512):
        super().__init__()
        self.names = spec.names
        self.norm = nn.LayerNorm(spec.total_width)
        self.mlp = nn.Sequential(
            nn.Linear(spec.total_width, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden // 2), nn.ReLU(),
            nn.Linear(hidden // 2, 1),
        )

    def forward(self, features):
        x = torch.cat([features[k] for k in self.names], dim=1)
        return self.mlp(self.norm(x)).squeeze(-1)
