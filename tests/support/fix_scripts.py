"""Small training scripts for ``gpudoctor fix``'s end-to-end tests (written into ``tmp_path``)."""

# Data-loader bound on any machine: each sample takes 4 ms to "load" (a sleep, so a loaded CPU
# does not blur it) and the step computes for about as long; in a worker process the loading
# overlaps the step. 512 samples: 128 steps, far more than the runs measure (--steps 12 or 24)
# and no epoch end among them; the fixed script, run to its end, takes about 2 s (4096 took 16).
# Both loader-bound scripts below read this dataset (each is a file of its own).
SLOW_DATASET = '''\
class Slow(Dataset):
    def __len__(self):
        return 512

    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.randn(8), torch.randn(1)
'''

# timm's shape: one training step in a helper under its autocast context, called from the loop
AMP_STEP = '''\
def one_step(model, x, y, opt, amp_autocast):
    with amp_autocast():
        loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
'''

LOADER_BOUND = '''\
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


''' + SLOW_DATASET + '''

def main():
    torch.manual_seed(0)
    loader = DataLoader(Slow(), batch_size=4, shuffle=True)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    total = 0.0
    for step, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        time.sleep(0.012)
        total += float(loss)
    print("END OF SCRIPT", total)


if __name__ == "__main__":
    main()
'''

# The same loader-bound training in a trainer class of a package of the project (slowpkg/fitter.py);
# the script only builds the parts and calls it (the minGPT shape: the loop in another module).
TRAINER_MODULE = '''\
import time

import torch
from torch.utils.data import DataLoader


class Fitter:
    def __init__(self, model, dataset):
        self.model = model
        self.dataset = dataset

    def fit(self):
        model = self.model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        loader = DataLoader(self.dataset, batch_size=4, shuffle=True)
        total = 0.0
        for x, y in loader:
            self.optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            self.optimizer.step()
            time.sleep(0.012)
            total += float(loss)
        return total
'''

TRAINER_SCRIPT = '''\
import time

import torch
from torch.utils.data import Dataset

from slowpkg.fitter import Fitter


''' + SLOW_DATASET + '''

if __name__ == "__main__":
    torch.manual_seed(0)
    print("END OF SCRIPT", Fitter(torch.nn.Linear(8, 1), Slow()).fit())
'''
