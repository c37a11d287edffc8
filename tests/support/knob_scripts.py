"""Tiny CPU training scripts for the ``--try`` model knobs (bf16, fp16, channels_last, compile)."""

# A small CNN; prints the dtype of the logits and of the loss at step 3, and the call order of
# the GradScaler, backward, clip and step of step 3 (the script knows nothing of gpudoctor).
CNN = """
import sys, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
sched = torch.optim.lr_scheduler.StepLR(opt, 10)
order = []
for name in ("scale", "unscale_", "update"):
    def wrap(orig, name=name):
        def f(self, *a, **k):
            order.append(name)
            return orig(self, *a, **k)
        return f
    setattr(torch.amp.GradScaler, name, wrap(getattr(torch.amp.GradScaler, name)))
model[0].weight.register_hook(lambda g: order.append("backward") if "backward" not in order else None)
opt.register_step_pre_hook(lambda *a: order.append("step"))
x_all, y_all = torch.randn(4, 8, 3, 16, 16), torch.randint(0, 4, (4, 8))
for step in range(10_000):
    order.clear()
    out = model(x_all[step % 4])
    loss = F.cross_entropy(out, y_all[step % 4])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    order.append("clip")
    opt.step()
    sched.step()
    if step == 3:
        print("DTYPES", out.dtype, loss.dtype, "INPUT_CL",
              x_all[0].is_contiguous(memory_format=torch.channels_last), flush=True)
        print("ORDER", ",".join(order), "NORM", float(norm), flush=True)
"""

# No convolution: channels_last cannot apply; the script runs its own bf16 autocast.
MLP_OWN_AUTOCAST = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
for step in range(10_000):
    x, y = torch.randn(8, 8), torch.randn(8, 1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""

# Two models, two optimizers (a GAN's shape): one GradScaler cannot serve both.
TWO_OPTIMIZERS = """
import torch
g, d = torch.nn.Linear(4, 8), torch.nn.Linear(8, 1)
opt_g, opt_d = torch.optim.SGD(g.parameters(), lr=0.01), torch.optim.SGD(d.parameters(), lr=0.01)
for step in range(10_000):
    fake = g(torch.randn(16, 4))
    d_loss = d(fake.detach()).mean() - d(torch.randn(16, 8)).mean()
    opt_d.zero_grad()
    d_loss.backward()
    opt_d.step()
    g_loss = -d(fake).mean()
    opt_g.zero_grad()
    g_loss.backward()
    opt_g.step()
"""
