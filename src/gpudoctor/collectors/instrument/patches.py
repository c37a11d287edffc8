"""The wrappers that watch the script: copies, host syncs, the loader, AMP, DDP, compile.

Each wrapper does host-side bookkeeping only and calls the original. Wrappers check
``S.quiet`` first so the probes' own tensor calls are not counted as the user's, and
``torch.compiler.is_compiling()`` so TorchDynamo traces straight through them.

Counted as host syncs, and timed (the host's time blocked in them: each one waits for the GPU
when the tensor is on CUDA): ``.item()``,
``.cpu()``, ``.tolist()``, ``.numpy()``, ``bool(tensor)``, ``.to("cpu")``/``copy_`` to the host
without ``non_blocking``, ``torch.cuda.synchronize()``, and printing or formatting a CUDA tensor.
GradScaler's own found-inf check inside ``scaler.step`` is not counted: it is the price of fp16
loss scaling, not a mistake in the script.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from gpudoctor.collectors.instrument import grad_allreduce, grad_norm, probes
from gpudoctor.collectors.instrument.caller_warnings import warn_as_caller
from gpudoctor.collectors.instrument.state import S

_perf = time.perf_counter


def _compiling() -> Any:
    import torch

    fn = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return fn if fn is not None else (lambda: False)


def install_all() -> None:
    """Install every wrapper once."""
    import torch

    global _is_compiling
    _is_compiling = _compiling()
    _patch_tensor(torch)
    _patch_sync(torch)
    _patch_loader(torch)
    _patch_backward(torch)
    _patch_amp(torch)
    _patch_misc(torch)
    grad_norm.install(torch, lambda: _is_compiling())
    grad_allreduce.install(torch)


def _is_compiling() -> bool:  # replaced in install_all
    return False


# ---- host-to-device copies and host syncs ------------------------------------------------------


def _note_h2d(src: Any, t0: float, non_blocking: bool) -> None:
    S.h2d_s += _perf() - t0
    nbytes = src.numel() * src.element_size()
    S.h2d_bytes += nbytes
    if src.is_floating_point() and src.element_size() >= 4:
        S.h2d_wide_float += nbytes  # float32/float64: the bytes uint8 or bf16 would shrink
    S.h2d_copies += 1
    if not non_blocking:
        S.h2d_blocking += 1
    try:
        pinned = src.is_pinned()
    except Exception:  # noqa: BLE001
        pinned = True
    if not pinned:
        S.h2d_pageable += nbytes


def _non_blocking(args: tuple, kwargs: dict) -> bool:
    if "non_blocking" in kwargs:
        return bool(kwargs["non_blocking"])
    for a in args:
        if a is True or a is False:
            return a  # the first positional bool of Tensor.to is non_blocking
    return False


def _patch_tensor(torch: Any) -> None:
    Tensor = torch.Tensor
    orig_to, orig_cuda, orig_copy = Tensor.to, Tensor.cuda, Tensor.copy_

    # Per call, only what the source's side needs: a tensor already on the GPU (most .to calls
    # in a step: dtype/layout casts) cannot be a host-to-device copy, so it is not timed.
    def to(self, *args, **kwargs):
        if S.quiet or _is_compiling():
            return orig_to(self, *args, **kwargs)
        if self.is_cuda:
            t0 = _perf()
            out = orig_to(self, *args, **kwargs)
            if out is not self and not out.is_cuda and not _non_blocking(args, kwargs):
                S.syncs += 1  # device to host, blocking: the host waits for the GPU
                S.sync_s += _perf() - t0
            return out
        t0 = _perf()
        out = orig_to(self, *args, **kwargs)
        if out is not self and out.is_cuda:
            _note_h2d(self, t0, _non_blocking(args, kwargs))
        return out

    def cuda(self, *args, **kwargs):
        if S.quiet or _is_compiling() or self.is_cuda:
            return orig_cuda(self, *args, **kwargs)
        t0 = _perf()
        out = orig_cuda(self, *args, **kwargs)
        _note_h2d(self, t0, _non_blocking(args, kwargs))
        return out

    def copy_(self, src, *args, **kwargs):
        if S.quiet or _is_compiling():
            return orig_copy(self, src, *args, **kwargs)
        if not self.is_cuda:
            t0 = _perf()
            out = orig_copy(self, src, *args, **kwargs)
            if getattr(src, "is_cuda", False) and not _non_blocking(args, kwargs):
                S.syncs += 1  # device to host, blocking
                S.sync_s += _perf() - t0
            return out
        t0 = _perf()
        out = orig_copy(self, src, *args, **kwargs)
        if isinstance(src, Tensor) and not src.is_cuda:
            _note_h2d(src, t0, _non_blocking(args, kwargs))
        return out

    for name, fn in (("to", to), ("cuda", cuda), ("copy_", copy_)):
        fn.__name__ = name
        fn.__doc__ = getattr(Tensor, name).__doc__
        fn.__wrapped__ = getattr(Tensor, name)
        setattr(Tensor, name, fn)


def _counting(orig: Any) -> Any:
    def wrapper(self, *args, **kwargs):
        if S.quiet or _is_compiling():
            return orig(self, *args, **kwargs)
        if self.is_cuda:
            S.syncs += 1
            S.quiet = True  # formatting calls .item()/.tolist() inside: count the print once
            t0 = _perf()
            try:
                return orig(self, *args, **kwargs)
            finally:
                S.sync_s += _perf() - t0  # the host blocked until the GPU caught up
                S.quiet = False
        return orig(self, *args, **kwargs)

    wrapper.__name__ = getattr(orig, "__name__", "wrapper")
    wrapper.__doc__ = getattr(orig, "__doc__", None)
    wrapper.__wrapped__ = orig
    return wrapper


def _patch_sync(torch: Any) -> None:
    Tensor = torch.Tensor
    for name in ("item", "cpu", "tolist", "numpy", "__bool__", "__repr__", "__format__"):
        setattr(Tensor, name, _counting(getattr(Tensor, name)))
    orig_sync = torch.cuda.synchronize

    def synchronize(device=None):
        if S.quiet:
            return orig_sync(device)
        S.syncs += 1
        t0 = _perf()
        try:
            return orig_sync(device)
        finally:
            S.sync_s += _perf() - t0

    synchronize.__doc__ = orig_sync.__doc__
    synchronize.__wrapped__ = orig_sync
    torch.cuda.synchronize = synchronize

    orig_empty = torch.cuda.empty_cache

    def empty_cache():
        if not S.quiet:
            S.empty_cache += 1
        return orig_empty()

    empty_cache.__doc__ = orig_empty.__doc__
    empty_cache.__wrapped__ = orig_empty
    torch.cuda.empty_cache = empty_cache


# ---- the DataLoader --------------------------------------------------------------------------


def _batch_size(batch: Any, torch: Any) -> tuple[int | None, int | None]:
    """(samples, tokens) of a batch: the first tensor's first dimension; tokens for int 2-D ids."""
    for _ in range(3):  # descend into (inputs, targets) / {"input_ids": ...} a little
        if isinstance(batch, torch.Tensor):
            break
        if isinstance(batch, dict):
            batch = next(iter(batch.values()), None)
        elif isinstance(batch, (list, tuple)) and batch:
            batch = batch[0]
        else:
            return None, None
    if not isinstance(batch, torch.Tensor) or batch.dim() == 0:
        return None, None
    tokens = batch.numel() if batch.dim() == 2 and not batch.dtype.is_floating_point else None
    return int(batch.shape[0]), tokens


def _patch_loader(torch: Any) -> None:
    import torch.utils.data as tud
    from torch.utils.data import dataloader as dl

    base = dl._BaseDataLoaderIter
    orig_next = base.__next__

    def __next__(self):
        host = S.host
        outer, host.op = host.op, host.op or "data"  # a torch.load in a dataset is the loader's time
        t0 = _perf()
        try:
            return_value = orig_next(self)
        finally:
            host.op = outer
            if S.step == 0 and S.data_wait_s == 0.0 and not S.seen.fetched:
                S.seen.fetched = True
                S.t_last = t0  # step 0 starts with its first batch, not at import
            S.data_wait_s += _perf() - t0
        counts = getattr(self, "_gpudoctor_counts", None)
        if counts is not None:
            counts.batches += 1  # which loader the loop iterates
        if not S.quiet:
            samples, tokens = _batch_size(return_value, torch)
            if samples is not None:
                S.samples = (S.samples or 0) + samples
            if tokens is not None:
                S.tokens = (S.tokens or 0) + tokens
        return return_value

    base.__next__ = __next__

    orig_iter = tud.DataLoader.__iter__

    def __iter__(self):
        it = orig_iter(self)
        if probes.is_owner():
            try:  # held weakly: the probes must not keep the user's loader alive
                S.loaders.add(self)
                counts = S.loader_counts_of(self)
            except TypeError:  # a DataLoader subclass that is not hashable: not counted
                return it
            counts.epochs += 1
            try:  # the iterator carries the plain counters, not the loader
                it._gpudoctor_counts = counts
            except AttributeError:  # an iterator type that takes no attributes: not counted
                pass
        return it

    tud.DataLoader.__iter__ = __iter__

    orig_set_epoch = tud.DistributedSampler.set_epoch

    def set_epoch(self, epoch):
        self._gpudoctor_set_epoch = True
        return orig_set_epoch(self, epoch)

    tud.DistributedSampler.set_epoch = set_epoch


# ---- backward, AMP, compile, DDP ---------------------------------------------------------------


def _patch_backward(torch: Any) -> None:
    import torch.autograd as autograd

    orig_backward = autograd.backward

    def backward(tensors, *args, **kwargs):
        if not S.quiet and not _is_compiling():
            loss = tensors[0] if isinstance(tensors, (list, tuple)) and tensors else tensors
            if isinstance(loss, torch.Tensor):
                scaled, S.last_scaled = S.last_scaled, None  # used once: a later tensor may reuse the id
                if scaled is not None and scaled[0] == id(loss):
                    loss = scaled[1]  # report the unscaled loss, not the GradScaler's product
                S.last_loss = loss
                S.backwards += 1
        return orig_backward(tensors, *args, **kwargs)

    backward.__doc__ = orig_backward.__doc__
    backward.__wrapped__ = orig_backward
    autograd.backward = backward


def _patch_amp(torch: Any) -> None:
    from torch.amp import autocast_mode

    ac = autocast_mode.autocast
    orig_enter = ac.__enter__

    def __enter__(self):
        if getattr(self, "_enabled", False):
            dtype = getattr(self, "fast_dtype", None)
            if dtype is not None:
                S.seen.autocast.add(str(dtype).removeprefix("torch."))
        return orig_enter(self)

    ac.__enter__ = __enter__

    try:
        from torch.amp import GradScaler
    except ImportError:  # older torch: only the CUDA one
        from torch.cuda.amp import GradScaler

    orig_init, orig_scale = GradScaler.__init__, GradScaler.scale
    orig_step, orig_update = GradScaler.step, GradScaler.update

    def __init__(self, *args, **kwargs):
        warn_as_caller(orig_init, self, *args, **kwargs)
        if self.is_enabled():
            S.seen.grad_scaler = True
            S.scaler_seen = True

    def scale(self, outputs):
        out = orig_scale(self, outputs)
        if isinstance(outputs, torch.Tensor) and isinstance(out, torch.Tensor):
            S.last_scaled = (id(out), outputs)
        return out

    def step(self, optimizer, *args, **kwargs):
        S.hook_fired = False
        enabled = self.is_enabled()
        # A fused optimizer always steps and skips inside its kernel: the optimizer hook reads
        # the scaler's device-side found-inf flag lazily (probes._fused_found_inf).
        fused = enabled and bool(getattr(optimizer, "_step_supports_amp_scaling", False))
        S.scaler_fused = self if fused else None
        was_quiet, S.quiet = S.quiet, True  # its found-inf check is a required sync: not counted
        try:
            result = orig_step(self, optimizer, *args, **kwargs)
        finally:
            S.quiet = was_quiet
            S.scaler_fused = None
        if enabled and not S.hook_fired:
            # The scaler found inf/NaN (its own .item() above) and never called
            # optimizer.step(): no hook fired, so the step boundary is recorded here.
            probes.scaler_skipped_step(optimizer)
        return result

    def update(self, *args, **kwargs):
        result = orig_update(self, *args, **kwargs)
        scale_tensor = getattr(self, "_scale", None)
        if self.is_enabled() and isinstance(scale_tensor, torch.Tensor):
            probes.record_scale(scale_tensor)
        return result

    GradScaler.__init__, GradScaler.scale = __init__, scale
    GradScaler.step, GradScaler.update = step, update


def _patch_misc(torch: Any) -> None:
    orig_compile = torch.compile

    def compile(*args, **kwargs):  # noqa: A001 - mirrors torch.compile
        S.seen.compiled = True
        return orig_compile(*args, **kwargs)

    compile.__doc__ = orig_compile.__doc__
    compile.__wrapped__ = orig_compile
    torch.compile = compile

    from torch.nn.parallel import DistributedDataParallel as DDP

    orig_ddp_init = DDP.__init__
    orig_hook = DDP.register_comm_hook

    def ddp_init(self, *args, **kwargs):
        orig_ddp_init(self, *args, **kwargs)
        S.seen.ddp_ref = weakref.ref(self)

    def register_comm_hook(self, state, hook):
        S.seen.comm_hook = getattr(hook, "__name__", type(hook).__name__)
        return orig_hook(self, state, hook)

    DDP.__init__ = ddp_init
    DDP.register_comm_hook = register_comm_hook

    from torch.nn import DataParallel

    orig_dp_init = DataParallel.__init__

    def dp_init(self, *args, **kwargs):
        orig_dp_init(self, *args, **kwargs)
        S.seen.dp_ref = weakref.ref(self)

    DataParallel.__init__ = dp_init
