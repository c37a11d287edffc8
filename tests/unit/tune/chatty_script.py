"""A plain training script for the script-mode tests: a tiny MLP fed by a DataLoader, printing a
line at every step (which must land in the trial's log, never in the tuner's table)."""

import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
data = TensorDataset(torch.randn(512, 8), torch.randint(0, 3, (512,)))
loader = DataLoader(data, batch_size=16, shuffle=True, num_workers=0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
done = 0
while done < steps:
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"CHATTY step {done} loss {loss.item():.3f}", flush=True)
        done += 1
        if done >= steps:
            break
