"""Small decorators used across the retrieval training scripts."""
import functools
import gc
import time
from collections import defaultdict

import torch

TIMINGS = defaultdict(list)


def timed(name):
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            t = time.perf_counter()
            out = fn(*args, **kwargs)
            TIMINGS[name].append(time.perf_counter() - t)
            return out
        return wrapper
    return deco


def release_memory(fn):
    """Drop unreachable host objects after the call (the tokenizer cache used to leak cycles)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        out = fn(*args, **kwargs)
        gc.collect()
        return out
    return wrapper


def log_every(n, key="loss"):
    def deco(fn):
        calls = {"n": 0, "t0": None}

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if calls["t0"] is None:
                calls["t0"] = time.perf_counter()
            out = fn(*args, **kwargs)
            if calls["n"] % n == 0:
                v = out[key]
                v = v.item() if torch.is_tensor(v) else v
                print(f"[{fn.__name__}] call {calls['n']} {key}={v:.4f} "
                      f"({time.perf_counter() - calls['t0']:.1f}s)", flush=True)
            calls["n"] += 1
            return out
        return wrapper
    return deco


def seed_everything(seed):
    import random
    random.seed(seed)
    torch.manual_seed(seed)


def on_device(device):
    """Move every tensor argument to ``device`` before calling."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            args = [a.to(device, non_blocking=True) if torch.is_tensor(a) else a for a in args]
            kwargs = {k: (v.to(device, non_blocking=True) if torch.is_tensor(v) else v) for k, v in kwargs.items()}
            return fn(*args, **kwargs)
        return wrapper
    return deco
