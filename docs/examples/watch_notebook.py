# %% [markdown]
# # gpudoctor.watch in a notebook
#
# Each `# %%` block is one Jupyter cell (VS Code and Jupytext open this file as a notebook).
# The training loop is ordinary PyTorch; its `DataLoader` is slow on purpose: every sample
# costs a few milliseconds of "decoding" in the main process (`num_workers=0`).
# `gpudoctor.watch` observes the first steps, writes a run directory and names the problem.
# Run it as a script too: `python docs/examples/watch_notebook.py [RUN_DIR]`.

# %%
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

import gpudoctor

device = "cuda" if torch.cuda.is_available() else "cpu"


class SlowDecode(Dataset):
    """Synthetic images whose per-sample "decode" takes 3 ms of host time."""

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, i: int):
        time.sleep(0.003)  # the planted problem: expensive per-sample work, no workers
        return torch.randn(3, 32, 32), i % 10


model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4),
    torch.nn.Flatten(), torch.nn.Linear(32 * 16, 10),
).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(SlowDecode(), batch_size=32, num_workers=0)  # `gpudoctor lint` flags it too (GD104)


def train(max_steps: int) -> int:
    """The user's loop: it knows nothing about gpudoctor."""
    for step, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step + 1 == max_steps:
            return step + 1
    return 0


# %%
run_dir = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else None
with gpudoctor.watch(steps=24, run_dir=run_dir) as w:
    done = train(max_steps=40)  # the loop runs on after the 24 observed steps
print(f"trained {done} steps; observed {w.status}; run directory {w.run_dir}")

# %%
for finding in w.findings:
    print(finding.severity.value, finding.code, "-", finding.title)

# %%
w.report()  # in Jupyter: the HTML report; in a terminal: the same text as `gpudoctor diagnose`
