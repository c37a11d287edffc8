import torch
import torch.nn as nn
import torch.nn.functional as F


class Tower(nn.Module):
    def __init__(self, n_ids, n_feats, dim=128, p=0.2):
        super().__init__()
        self.id_emb = nn.Embedding(n_ids, dim)
        self.feat_emb = nn.EmbeddingBag(n_feats, dim, mode="mean")
        self.mlp = nn.Sequential(nn.Linear(2 * dim, 256), nn.ReLU(), nn.Dropout(p), nn.Linear(256, dim))

    def forward(self, ids, feats, offsets):
        h = torch.cat([self.id_emb(ids), self.feat_emb(feats, offsets)], dim=-1)
        return F.normalize(self.mlp(h), dim=-1)


class TwoTower(nn.Module):
    def __init__(self, n_users, n_items, n_user_feats, n_item_feats, dim=128, temperature=0.05):
        super().__init__()
        self.user = Tower(n_users, n_user_feats, dim)
        self.item = Tower(n_items, n_item_feats, dim)
        self.t = temperature

    def forward(self, u, i):
        zu = self.user(*u)
        zi = self.item(*i)
        logits = zu @ zi.t() / self.t
        labels = torch.arange(logits.size(0), device=logits.device)
        return F.cross_entropy(logits, labels)
