"""A very small stand-in for HF Accelerate: device placement, autocast, clipping, printing."""
import contextlib

import torch


class Accelerator:
    def __init__(self, mixed_precision="bf16"):
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.mixed_precision = mixed_precision
        if self.device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True

    def prepare(self, model, optimizer_cls, **opt_kwargs):
        model = model.to(self.device)
        if self.device.type == "cuda":
            opt_kwargs.setdefault("fused", True)
        optimizer = optimizer_cls(model.parameters(), **opt_kwargs)
        return model, optimizer

    def autocast(self):
        if self.mixed_precision == "bf16":
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def backward(self, loss):
        loss.backward()

    def clip_grad_norm_(self, params, max_norm):
        return torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)

    def print(self, *args, **kwargs):
        print(*args, **kwargs, flush=True)
