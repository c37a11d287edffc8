"""Tiny training scripts the run tests write into ``tmp_path`` (CPU, a few ms a step)."""

TRAIN = """
import torch
from torch.utils.data import DataLoader, TensorDataset
ds = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
loader = DataLoader(ds, batch_size=8, shuffle=True)
model = torch.nn.Linear(8, 1)
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
for epoch in range(100):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
print("END OF SCRIPT", flush=True)
"""

SLOW_DATA = """
import time, torch
from torch.utils.data import DataLoader, Dataset
class Slow(Dataset):
    def __len__(self):
        return 4096
    def __getitem__(self, i):
        time.sleep(0.003)  # per-sample work a worker process can do in parallel
        return torch.randn(8), torch.randn(1)
loader = DataLoader(Slow(), batch_size=8, shuffle=True)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""

CRASH_AT_IMPORT = """
import torch
raise RuntimeError("boom while importing the model")
"""

NO_STEP = """
print("setting up forever", flush=True)
import time, torch
model = torch.nn.Linear(2, 2)
time.sleep(120)
"""

FOREVER = """
import time, torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
while True:
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.005)
"""

DDP = """
import torch, torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
dist.init_process_group("gloo")
ds = TensorDataset(torch.randn(512, 8), torch.randn(512, 1))
sampler = DistributedSampler(ds)
loader = DataLoader(ds, batch_size=8, sampler=sampler)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(100):
    sampler.set_epoch(epoch)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
dist.destroy_process_group()
"""

SCALER = """
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randn(256, 1)), batch_size=8)
model = torch.nn.DataParallel(torch.nn.Linear(8, 1))  # on a CPU machine: just the module
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
for epoch in range(100):
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
        if epoch == 0 and i >= 4:
            loss = loss * float("nan")  # from step 4 on: NaN loss, every step skipped
        for half in (0, 1):  # two micro-batches per optimizer step
            scaler.scale(loss / 2).backward(retain_graph=half == 0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        torch.cuda.empty_cache()  # the anti-pattern the probes count (a no-op without CUDA)
"""

# A fused optimizer under GradScaler: it always steps (so the optimizer hook fires) and skips the
# update inside its kernel; the skip flag exists only as the scaler's device-side found_inf.
SCALER_FUSED = """
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randn(256, 1)), batch_size=8)
model = torch.nn.Linear(8, 1)
opt = torch.optim.AdamW(model.parameters(), lr=0.01, fused=True)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
for epoch in range(100):
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
        if epoch == 0 and i >= 4:
            loss = loss * float("nan")  # from step 4 on: NaN loss, every step skipped
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
"""

# Hangs after its 10th optimizer step (steps 0-9 done), in a sleep or a wait the parent must break.
HANG_AFTER_10 = """
import threading, time, torch
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
def wait_forever():
    {hang}
for step in range(1000):
    loss = model(torch.randn(8, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 9:
        print("hanging now", flush=True)
        wait_forever()
"""

# Dies hard after 30 fast optimizer steps.
DIE_AFTER_30 = """
import os, signal, ctypes, torch
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1000):
    loss = model(torch.randn(8, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 29:
        {die}
"""

# Trains 6 steps with a spawn-context DataLoader worker, then runs child.py (32 steps of its own).
SUBPROCESS_AFTER_STEPS = """
import subprocess, sys, torch
from torch.utils.data import DataLoader, TensorDataset
if __name__ == "__main__":
    loader = DataLoader(TensorDataset(torch.randn(48, 8), torch.randn(48, 1)), batch_size=8,
                        num_workers=1, multiprocessing_context="spawn")
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    subprocess.run([sys.executable, "child.py"], check=True)
"""

# torch.multiprocessing.spawn: 2 gloo ranks that each train 12 steps (rank from the spawn index).
MP_SPAWN = """
import os, torch, torch.distributed as dist, torch.multiprocessing as mp
def worker(rank, world, port):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(12):
        loss = model(torch.randn(8, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.barrier()
    dist.destroy_process_group()
if __name__ == "__main__":
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(2, port), nprocs=2)
"""

# torchrun, 2 gloo ranks: rank 1 hangs after its 10th step, rank 0 waits for it in all_reduce.
RANK1_HANGS = """
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1000):
    loss = model(torch.randn(8, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    opt.step()
    if step == 9 and rank == 1:
        time.sleep(10**6)
"""

# A compilation that takes {seconds} s at step 5 (and one of 0.2 s before the first step), made
# with TorchDynamo's own compile callbacks around a sleep: what a long max-autotune compile looks
# like to gpudoctor, on any machine. {seconds} = 10**6: a compile that hangs.
SLOW_COMPILE = """
import sys, time, torch
from torch._dynamo.callback import CallbackTrigger, callback_handler
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
def compiling(seconds, step):
    with callback_handler.install_callbacks(CallbackTrigger.DYNAMO, f"{{step}}/0"):
        time.sleep(seconds)
for step in range(12):
    if step == 0:
        compiling(0.2, step)
    if step == 5:
        print("compiling now", flush=True)
        compiling({seconds}, step)
    loss = model(torch.randn(8, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""

# Never compiles: no compile event, no compile time.
NO_COMPILE = """
import torch
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(8):
    loss = model(torch.randn(8, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
