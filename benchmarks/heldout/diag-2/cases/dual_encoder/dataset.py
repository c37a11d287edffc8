"""Query/passage pair manifest. In the real pipeline this is read from parquet shards."""
import random
from dataclasses import dataclass, field

import torch


@dataclass(slots=True)
class PairRecord:
    pair_id: int
    query_row: int
    passage_row: int
    shard: str
    lang: str
    tags: list = field(default_factory=list)


class PairManifest:
    def __init__(self, n_pairs, n_rows, seed=0):
        rng = random.Random(seed)
        langs = ["en", "de", "fr", "es", "ja", "zh"]
        self.records = [
            PairRecord(i, rng.randrange(n_rows), rng.randrange(n_rows), f"shard-{i % 1024:05d}",
                       langs[i % len(langs)], [i % 7, i % 11])
            for i in range(n_pairs)
        ]
        self.rng = rng

    def __len__(self):
        return len(self.records)

    def sample(self, batch_size):
        recs = self.rng.sample(self.records, batch_size)
        q = torch.tensor([r.query_row for r in recs], dtype=torch.long)
        p = torch.tensor([r.passage_row for r in recs], dtype=torch.long)
        return q, p


class FeatureStore:
    """Precomputed (frozen backbone) embeddings, resident on the accelerator."""

    def __init__(self, n_rows, dim, device, seed=0):
        g = torch.Generator(device="cpu").manual_seed(seed)
        self.query = torch.randn(n_rows, dim, generator=g).to(device)
        self.passage = torch.randn(n_rows, dim, generator=g).to(device)

    def lookup(self, q_idx, p_idx):
        dev = self.query.device
        return self.query[q_idx.to(dev, non_blocking=True)], self.passage[p_idx.to(dev, non_blocking=True)]
