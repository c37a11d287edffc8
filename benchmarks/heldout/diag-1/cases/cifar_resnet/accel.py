"""A tiny Accelerator-like helper: device placement, mixed precision, backward."""
import contextlib

import torch


class Accelerator:
    def __init__(self, mixed_precision="bf16"):
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.mixed_precision = mixed_precision if self.device.type == "cuda" else "no"
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True

    def prepare(self, model, optimizer_fn):
        model = model.to(self.device, memory_format=torch.channels_last)
        return model, optimizer_fn(model.parameters())

    def autocast(self):
        if self.mixed_precision == "bf16":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def backward(self, loss):
        loss.backward()

    def print(self, *a, **kw):
        print(*a, **kw, flush=True)
