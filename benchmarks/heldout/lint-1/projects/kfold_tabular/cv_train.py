import argparse
import json
import logging

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold
from torch.utils.data import DataLoader, TensorDataset

logging.basicConfig(level=logging.INFO)
log = logging.getLogger("cv")


class TabularMLP(nn.Module):
    def __init__(self, n_num, cat_cards, emb_dim=16, hidden=512, p=0.3):
        super().__init__()
        self.embs = nn.ModuleList([nn.Embedding(c, emb_dim) for c in cat_cards])
        d_in = n_num + emb_dim * len(cat_cards)
        self.net = nn.Sequential(
            nn.Linear(d_in, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(p),
            nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(p),
            nn.Linear(hidden, 1),
        )

    def forward(self, x_num, x_cat):
        e = [emb(x_cat[:, i]) for i, emb in enumerate(self.embs)]
        return self.net(torch.cat([x_num] + e, dim=1)).squeeze(1)


def make_loader(x_num, x_cat, y, bs, shuffle):
    ds = TensorDataset(torch.tensor(x_num, dtype=torch.float32),
                       torch.tensor(x_cat, dtype=torch.long),
                       torch.tensor(y, dtype=torch.float32))
    return DataLoader(ds, batch_size=bs, shuffle=shuffle, drop_last=shuffle)


def predict(model, loader, device):
    model.eval()
    preds = []
    with torch.no_grad():
        for xn, xc, _ in loader:
            logits = model(xn.to(device), xc.to(device))
            preds.append(torch.sigmoid(logits).detach().cpu())
    return torch.cat(preds).numpy()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--csv", default="data/train.csv")
    p.add_argument("--target", default="label")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--bs", type=int, default=1024)
    p.add_argument("--lr", type=float, default=2e-3)
    args = p.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    df = pd.read_csv(args.csv)
    cat_cols = [c for c in df.columns if df[c].dtype == object]
    num_cols = [c for c in df.columns if c not in cat_cols + [args.target]]
    for c in cat_cols:
        df[c] = df[c].astype("category").cat.codes + 1
    x_num = ((df[num_cols] - df[num_cols].mean()) / (df[num_cols].std() + 1e-6)).fillna(0).values
    x_cat = df[cat_cols].values
    y = df[args.target].values
    cards = [int(df[c].max()) + 1 for c in cat_cols]

    oof = np.zeros(len(df))
    fold_scores = []
    skf = StratifiedKFold(n_splits=args.folds, shuffle=True, random_state=42)
    for fold, (tr, va) in enumerate(skf.split(x_num, y)):
        model = TabularMLP(len(num_cols), cards).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-5)
        criterion = nn.BCEWithLogitsLoss()
        train_loader = make_loader(x_num[tr], x_cat[tr], y[tr], args.bs, shuffle=True)
        val_loader = make_loader(x_num[va], x_cat[va], y[va], args.bs * 4, shuffle=False)

        best = 0.0
        model.train()
        for epoch in range(args.epochs):
            optimizer.zero_grad()
            for xn, xc, yb in train_loader:
                xn, xc, yb = xn.to(device), xc.to(device), yb.to(device)
                loss = criterion(model(xn, xc), yb)
                loss.backward()
                optimizer.step()
            val_pred = predict(model, val_loader, device)
            auc = roc_auc_score(y[va], val_pred)
            if auc > best:
                best = auc
                oof[va] = val_pred
                torch.save(model.state_dict(), f"mlp_fold{fold}.pt")
            log.info("fold %d epoch %d auc %.5f", fold, epoch, auc)
        fold_scores.append(best)

    log.info("cv auc %.5f +- %.5f, oof auc %.5f", np.mean(fold_scores), np.std(fold_scores),
             roc_auc_score(y, oof))
    with open("cv_scores.json", "w") as f:
        json.dump({"folds": fold_scores}, f)


if __name__ == "__main__":
    main()
