import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class ResBlock(nn.Module):
    def __init__(self, ch, tdim):
        super().__init__()
        self.n1 = nn.GroupNorm(32, ch)
        self.c1 = nn.Conv2d(ch, ch, 3, padding=1)
        self.t = nn.Linear(tdim, ch)
        self.n2 = nn.GroupNorm(32, ch)
        self.drop = nn.Dropout(0.1)
        self.c2 = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x, temb):
        h = self.c1(F.silu(self.n1(x))) + self.t(temb)[:, :, None, None]
        h = self.c2(self.drop(F.silu(self.n2(h))))
        return x + h


class TinyUNet(nn.Module):
    def __init__(self, ch=128, tdim=512, depth=4):
        super().__init__()
        self.tdim = tdim
        self.temb = nn.Sequential(nn.Linear(tdim, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.inp = nn.Conv2d(3, ch, 3, padding=1)
        self.blocks = nn.ModuleList([ResBlock(ch, tdim) for _ in range(depth)])
        self.out = nn.Sequential(nn.GroupNorm(32, ch), nn.SiLU(), nn.Conv2d(ch, 3, 3, padding=1))

    def forward(self, x, t):
        temb = self.temb(timestep_embedding(t, self.tdim))
        h = self.inp(x)
        for b in self.blocks:
            h = b(h, temb)
        return self.out(h)


class GaussianDiffusion:
    def __init__(self, timesteps=1000, device="cuda"):
        self.T = timesteps
        betas = torch.linspace(1e-4, 0.02, timesteps, device=device)
        self.betas = betas
        self.alphas = 1.0 - betas
        self.alpha_bar = torch.cumprod(self.alphas, dim=0)

    def q_sample(self, x0, t, noise):
        ab = self.alpha_bar[t][:, None, None, None]
        return ab.sqrt() * x0 + (1 - ab).sqrt() * noise

    def loss(self, model, x0):
        t = torch.randint(0, self.T, (x0.size(0),), device=x0.device)
        noise = torch.randn_like(x0)
        return F.mse_loss(model(self.q_sample(x0, t, noise), t), noise)

    def p_sample_loop(self, model, shape, device):
        x = torch.randn(shape, device=device)
        for i in reversed(range(self.T)):
            t = torch.full((shape[0],), i, device=device, dtype=torch.long)
            eps = model(x, t)
            a, ab, b = self.alphas[i], self.alpha_bar[i], self.betas[i]
            mean = (x - b / (1 - ab).sqrt() * eps) / a.sqrt()
            x = mean + (b.sqrt() * torch.randn_like(x) if i > 0 else 0.0)
        return x.clamp(-1, 1)
