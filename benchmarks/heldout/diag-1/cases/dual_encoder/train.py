"""In-batch-negatives dual encoder for passage retrieval."""
import argparse
import os

import torch
from torch import nn
import torch.nn.functional as F

from corpus import PairBatcher, load_pairs
from utils import log_every, release_memory, seed_everything, timed


class Tower(nn.Module):
    def __init__(self, vocab, d, layers, heads, max_len):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(max_len, d) * 0.02)
        block = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True,
                                           norm_first=True, activation="gelu")
        self.enc = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)

    def forward(self, ids):
        h = self.enc(self.tok(ids) + self.pos[: ids.shape[1]])
        return F.normalize(h.mean(1), dim=-1)


class DualEncoder(nn.Module):
    def __init__(self, vocab, d=512, layers=4, heads=8, max_len=64, temperature=0.05):
        super().__init__()
        self.q = Tower(vocab, d, layers, heads, max_len)
        self.p = Tower(vocab, d, layers, heads, max_len)
        self.temperature = temperature

    def forward(self, q_ids, p_ids):
        scores = self.q(q_ids) @ self.p(p_ids).T / self.temperature
        return F.cross_entropy(scores.float(), torch.arange(len(scores), device=scores.device))


def make_train_step(model, optimizer, device):
    amp = device == "cuda"

    @log_every(50)
    @release_memory
    @timed("train_step")
    def train_step(queries, passages):
        q = torch.tensor(queries).pin_memory() if amp else torch.tensor(queries)
        p = torch.tensor(passages).pin_memory() if amp else torch.tensor(passages)
        q, p = q.to(device, non_blocking=True), p.to(device, non_blocking=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
            loss = model(q, p)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return {"loss": loss.detach()}

    return train_step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--pairs", type=int, default=30_000)
    ap.add_argument("--batch-size", type=int, default=1024)
    args = ap.parse_args()
    smoke = os.environ.get("SMOKE") == "1"
    vocab, q_len, d_len = (300, 8, 16) if smoke else (30000, 32, 32)
    if smoke:
        args.pairs, args.batch_size = 200, 8

    seed_everything(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    records = load_pairs(args.pairs, q_len, d_len, vocab)
    model = (DualEncoder(vocab, d=32, layers=1, heads=2) if smoke else DualEncoder(vocab)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.01)
    train_step = make_train_step(model, optimizer, device)
    batches = iter(PairBatcher(records, args.batch_size))
    model.train()
    for _ in range(args.steps):
        train_step(*next(batches))
    print("done")


if __name__ == "__main__":
    main()
