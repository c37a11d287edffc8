import functools
import logging
import time

import torch

log = logging.getLogger(__name__)
TIMINGS = {}


def timed(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        TIMINGS.setdefault(fn.__name__, []).append(time.perf_counter() - t0)
        return out
    return wrapper
