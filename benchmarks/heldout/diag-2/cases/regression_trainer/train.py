import argparse
import os
import tempfile

import torch
import torch.nn as nn

from trainer import LossPrinter, ModelCheckpoint, Trainer

SMOKE = os.environ.get("SMOKE") == "1"
IN_DIM, HIDDEN, DEPTH, BATCH = (16, 32, 2, 8) if SMOKE else (256, 2048, 6, 32768)


class ResidualMLP(nn.Module):
    def __init__(self, in_dim, hidden, depth, out_dim=1):
        super().__init__()
        self.inp = nn.Linear(in_dim, hidden)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, hidden), nn.GELU()) for _ in range(depth)
        )
        self.out = nn.Linear(hidden, out_dim)

    def forward(self, x):
        h = self.inp(x)
        for blk in self.blocks:
            h = h + blk(h)
        return self.out(h).squeeze(-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--ckpt-dir", default=os.path.join(tempfile.gettempdir(), "regression_trainer_ckpt"))
    args = ap.parse_args()
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"

    model = ResidualMLP(IN_DIM, HIDDEN, DEPTH).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    w_true = torch.randn(IN_DIM, device=device)

    def batch_fn():
        x = torch.randn(BATCH, IN_DIM, device=device)
        y = torch.sin(x @ w_true) + 0.1 * torch.randn(BATCH, device=device)
        return x, y

    trainer = Trainer(
        model, opt, batch_fn, nn.functional.mse_loss, device,
        callbacks=[LossPrinter(every=50), ModelCheckpoint(args.ckpt_dir, every_n_steps=10)],
    )
    trainer.fit(args.steps)


if __name__ == "__main__":
    main()
