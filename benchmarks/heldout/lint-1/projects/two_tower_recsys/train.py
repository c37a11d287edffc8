import argparse
import logging
import pickle

import torch
from torch.utils.data import DataLoader, Dataset

from model import TwoTower

logging.basicConfig(level=logging.INFO)
log = logging.getLogger("2tower")


class Interactions(Dataset):
    def __init__(self, path):
        with open(path, "rb") as f:
            blob = pickle.load(f)
        self.pairs = blob["pairs"]
        self.user_feats = blob["user_feats"]
        self.item_feats = blob["item_feats"]
        self.sizes = blob["sizes"]

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, i):
        u, it = self.pairs[i]
        return u, self.user_feats[u], it, self.item_feats[it]


def collate(batch):
    us, ufs, its, ifs = zip(*batch)

    def bag(lists):
        offsets = torch.tensor([0] + [len(x) for x in lists[:-1]]).cumsum(0)
        return torch.tensor([f for x in lists for f in x]), offsets

    uf, uo = bag(ufs)
    itf, io = bag(ifs)
    return (torch.tensor(us), uf, uo), (torch.tensor(its), itf, io)


def to_device(side, device):
    return tuple(t.to(device, non_blocking=True) for t in side)


def evaluate_recall(model, loader, device, k=50):
    hits, total = 0, 0
    with torch.no_grad():
        for u, i in loader:
            zu = model.user(*to_device(u, device))
            zi = model.item(*to_device(i, device))
            scores = zu @ zi.t()
            topk = scores.topk(min(k, scores.size(1)), dim=1).indices
            target = torch.arange(scores.size(0), device=device).unsqueeze(1)
            hits += (topk == target).any(dim=1).sum()
            total += scores.size(0)
    return float(hits) / total


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--train", default="data/train.pkl")
    p.add_argument("--val", default="data/val.pkl")
    p.add_argument("--bs", type=int, default=4096)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-3)
    args = p.parse_args()

    device = torch.device("cuda")
    train_ds, val_ds = Interactions(args.train), Interactions(args.val)
    kw = dict(collate_fn=collate, num_workers=6, pin_memory=True, persistent_workers=True)
    train_loader = DataLoader(train_ds, batch_size=args.bs, shuffle=True, drop_last=True, **kw)
    val_loader = DataLoader(val_ds, batch_size=1024, **kw)

    model = TwoTower(*train_ds.sizes)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    model.to(device)

    for epoch in range(args.epochs):
        model.train()
        running = 0.0
        for step, (u, i) in enumerate(train_loader):
            loss = model(to_device(u, device), to_device(i, device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            running = running + loss
        recall = evaluate_recall(model, val_loader, device)
        log.info("epoch %d loss %.4f recall@50 %.4f", epoch, running / (step + 1), recall)
        torch.save(model.state_dict(), f"two_tower_e{epoch}.pt")


if __name__ == "__main__":
    main()
