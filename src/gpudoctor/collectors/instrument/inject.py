"""The ``--try`` knobs that act on the trained model: ``bf16``, ``fp16``, ``channels_last``,
``compile`` (and ``non_blocking``, in :mod:`~gpudoctor.collectors.instrument.non_blocking`); the
table of knobs is in :mod:`gpudoctor.collectors.knobs`.

Finding the trained model, without a change to the script: every optimizer is remembered when it
is built (``Optimizer.__init__``), and a global forward pre-hook looks at each module call until
it sees the outermost module whose parameters include all of one optimizer's parameters. That
module is adopted (the hook is removed then: the search costs nothing after the first step):

* ``channels_last``: ``module.to(memory_format=torch.channels_last)`` when it has 4-D weights
  (``param.data`` is replaced in place, so the optimizer keeps its parameters); its 4-D
  floating-point inputs are converted by a forward pre-hook;
* ``compile``: ``forward`` becomes ``torch.compile(type(module).forward)`` bound to the module
  (a bound method, so a ``copy.deepcopy`` of the model, an EMA copy, calls its own weights);
* ``bf16``/``fp16``: a forward pre-hook enters ``torch.autocast`` unless it is already entered;
  ``backward()`` (and, failing that, the optimizer step) leaves it. So the forward *and the loss*
  run under autocast, backward and the step outside it. It stays eager, outside the compiled
  region, which reads autocast as global state;
* ``fp16`` also adds a ``GradScaler``: ``backward`` is given ``scaler.scale(loss)``;
  ``clip_grad_norm_``/``clip_grad_value_`` first call ``scaler.unscale_``; the optimizer's
  ``step`` becomes ``scaler.step(optimizer)`` then ``scaler.update()``.

What each knob did, or why it did nothing, goes into :func:`notes` (``knob_notes`` of the rank's
config). Our own tensor calls run under ``S.quiet`` so that the probes do not count them.
"""

from __future__ import annotations

import types
import weakref
from typing import Any

from gpudoctor.collectors.instrument.state import S, is_owner

_AUTOCAST = {"bf16": "bfloat16", "fp16": "float16"}


class _Injected:
    """What the model knobs found and set up in this process (one instance, :data:`I`)."""

    def __init__(self) -> None:
        self.knobs: frozenset[str] = frozenset()
        self.optimizers: list[weakref.ref] = []
        self.rejected: Any = weakref.WeakSet()  # modules that do not hold an optimizer's parameters
        self.search: Any = None  # the global forward pre-hook's handle while searching
        self.root: weakref.ref | None = None
        self.opt: weakref.ref | None = None
        self.device = ""
        self.dtype: Any = None  # autocast dtype, None when no autocast is injected
        self.ctx: Any = None  # the entered autocast context
        self.convert_inputs = False
        self.scaler: Any = None
        self.orig_step: Any = None
        self.in_step = False
        self.scaled = False  # a scaled backward happened since the last step
        self.unscaled = False  # unscale_ was called since the last step
        self.notes: list[str] = []


I = _Injected()


def note(text: str) -> None:
    if text not in I.notes:
        I.notes.append(text)


def install(knobs: tuple[str, ...]) -> None:
    """Install what the model knobs among ``knobs`` need (called once, after the probes)."""
    import torch

    I.knobs = frozenset(knobs)
    if I.knobs & {"bf16", "fp16", "channels_last", "compile"}:
        _track_optimizers(torch)
        I.search = torch.nn.modules.module.register_module_forward_pre_hook(_find_root)
    if I.knobs & {"bf16", "fp16"}:
        _patch_backward(torch)
        import torch.optim.optimizer as optim_mod

        optim_mod.register_optimizer_step_pre_hook(lambda opt, args, kwargs: _leave_autocast())
    if "fp16" in I.knobs:
        _patch_clip(torch)
    if "non_blocking" in I.knobs:
        from gpudoctor.collectors.instrument import non_blocking

        non_blocking.install(torch)


def notes(device: str) -> tuple[str, ...]:
    """What each knob did, or why it did nothing, for the rank's config (``device``: "cuda:0", "cpu")."""
    out = list(I.notes)
    if I.root is None:
        for knob in sorted(I.knobs & {"bf16", "fp16", "channels_last", "compile"}):
            out.append(f"{knob}: not applied: no nn.Module holding all the parameters of an "
                       "optimizer was called after the optimizer was built")
    from gpudoctor.collectors.knobs import GPU_ONLY_KNOBS, LOADER_KNOBS, LOADERS_BUILT

    unused = sorted(I.knobs & set(LOADER_KNOBS))
    if unused and LOADERS_BUILT[0] == 0:
        out.append(f"{', '.join(unused)}: not applied: the script built no torch DataLoader (batches made "
                   "another way: pin a host tensor once with .pin_memory(); gpudoctor fix does that)")
    if "non_blocking" in I.knobs and not device.startswith("cpu") and _pinned_copies() == 0:
        out.append("non_blocking: not applied: no copy from pinned host memory to the GPU was seen "
                   "(combine it with pin_memory)")
    if device.startswith("cpu"):
        for knob in sorted(I.knobs & set(GPU_ONLY_KNOBS)):
            out.append(f"{knob}: no effect on a CPU run")
    return tuple(out)


def _pinned_copies() -> int:
    from gpudoctor.collectors.instrument import non_blocking

    return non_blocking.COPIES[0]


# ---- finding the trained model ----------------------------------------------------------------


def _compiling() -> bool:
    from gpudoctor.collectors.instrument import patches

    return bool(patches._is_compiling())


def _track_optimizers(torch: Any) -> None:
    Optimizer = torch.optim.Optimizer
    orig_init = Optimizer.__init__

    def __init__(self, *args, **kwargs):
        orig_init(self, *args, **kwargs)
        if is_owner():
            I.optimizers.append(weakref.ref(self))

    __init__.__wrapped__ = orig_init
    Optimizer.__init__ = __init__


def _find_root(module: Any, args: tuple) -> Any:
    if I.root is not None or S.quiet or not I.optimizers or not is_owner() or _compiling():
        return None
    if module in I.rejected:
        if S.step >= 3 and I.search is not None:  # not found in three steps: stop paying for the search
            I.search.remove()
            I.search = None
        return None
    mine = {id(p) for p in module.parameters()}
    if mine:
        for ref in I.optimizers:
            opt = ref()
            theirs = {id(p) for g in opt.param_groups for p in g["params"]} if opt is not None else set()
            if theirs and theirs <= mine:
                return _adopt(module, opt, args)
    I.rejected.add(module)
    return None


def _adopt(module: Any, opt: Any, args: tuple) -> Any:
    """``module`` is the trained model: apply the knobs; return this first call's inputs."""
    import torch

    I.root, I.opt = weakref.ref(module), weakref.ref(opt)
    if I.search is not None:
        I.search.remove()  # safe: the module call iterates over a copy of the hooks
        I.search = None
    I.rejected = weakref.WeakSet()
    name = type(module).__name__
    inner = getattr(module, "module", module) if name in ("DistributedDataParallel", "DataParallel") else module
    params = list(module.parameters())
    I.device = params[0].device.type
    if name == "DataParallel":
        for knob in sorted(I.knobs & {"bf16", "fp16", "compile"}):
            note(f"{knob}: not applied: torch.nn.DataParallel runs the forward in its own threads "
                 "(autocast is per thread); use DistributedDataParallel")
    if "channels_last" in I.knobs:
        _channels_last(torch, inner)
    if "compile" in I.knobs and name != "DataParallel":
        _compile(torch, inner)
    wanted = [k for k in ("bf16", "fp16") if k in I.knobs]
    if wanted and name != "DataParallel":
        _setup_autocast(torch, wanted[0], opt)
    if I.dtype is not None or I.convert_inputs:
        module.register_forward_pre_hook(_on_root_forward, with_kwargs=True)
        new_args, _ = _on_root_forward(module, args, {})  # its hook was not in this call's list
        return new_args
    return None


def _on_root_forward(module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    if S.quiet or _compiling() or not is_owner():
        return args, kwargs
    if I.dtype is not None and I.ctx is None:
        _enter_autocast()
    if I.convert_inputs:
        args = tuple(_to_channels_last(a) for a in args)
        kwargs = {k: _to_channels_last(v) for k, v in kwargs.items()}
    return args, kwargs


# ---- channels_last and compile ----------------------------------------------------------------


def _channels_last(torch: Any, model: Any) -> None:
    name = type(model).__name__
    if not any(p.dim() == 4 for p in model.parameters()):
        note(f"channels_last: not applied: {name} has no 4-D (convolution) weights")
        return
    if any(type(p).__name__ == "DTensor" for p in model.parameters()):
        note("channels_last: not applied: FSDP-sharded parameters")
        return
    was_quiet, S.quiet = S.quiet, True
    try:
        model.to(memory_format=torch.channels_last)
    finally:
        S.quiet = was_quiet
    I.convert_inputs = True
    note(f"channels_last: {name} weights and its 4-D inputs in torch.channels_last")


def _to_channels_last(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor) and value.dim() == 4 and value.is_floating_point():
        return value.contiguous(memory_format=torch.channels_last)
    return value


def _compile(torch: Any, model: Any) -> None:
    name = type(model).__name__
    if S.seen.compiled or name == "OptimizedModule":
        note("compile: not applied: the script already calls torch.compile")
        return
    if isinstance(model.__dict__.get("forward"), types.MethodType):
        note(f"compile: not applied: {name}.forward was replaced on the instance")
        return
    model.forward = types.MethodType(torch.compile(type(model).forward), model)
    note(f"compile: torch.compile({name}.forward), default mode; the first steps compile")


# ---- autocast and the GradScaler ---------------------------------------------------------------


def _setup_autocast(torch: Any, knob: str, opt: Any) -> None:
    dtype = getattr(torch, _AUTOCAST[knob])
    device = I.device if I.device in ("cuda", "cpu", "xpu") else "cpu"
    if device == "cuda" and knob == "bf16" and not torch.cuda.is_bf16_supported():
        note("bf16: not applied: this GPU has no bfloat16 support; try fp16")
        return
    if S.seen.autocast:
        note(f"{knob}: not applied: the script already uses autocast "
             f"({', '.join(sorted(S.seen.autocast))})")
        return
    if knob == "fp16" and S.scaler_seen:
        note("fp16: not applied: the script already has its own GradScaler")
        return
    if knob == "fp16" and sum(ref() is not None for ref in I.optimizers) > 1:
        # one scaler would scale every backward, but step only this optimizer through it
        note("fp16: not applied: several optimizers (a GAN?); try bf16, which needs no GradScaler")
        return
    I.device, I.dtype = device, dtype
    if knob == "fp16":
        was_quiet, S.quiet = S.quiet, True
        try:
            I.scaler = torch.amp.GradScaler(device)
        finally:
            S.quiet = was_quiet
        I.orig_step = opt.step

        def step(self: Any, *args: Any, **kwargs: Any) -> Any:
            return _scaled_step(self, *args, **kwargs)

        if getattr(I.orig_step, "_wrapped_by_lr_sched", False):
            step._wrapped_by_lr_sched = True  # type: ignore[attr-defined]  # the scheduler's own mark
        opt.step = types.MethodType(step, opt)  # a bound method, as LR schedulers expect
        note(f"fp16: autocast('{device}', float16) from {_root_name()}'s forward to backward(); "
             "GradScaler: scale -> backward -> unscale_ -> clip -> step -> update")
    else:
        note(f"bf16: autocast('{device}', bfloat16) from {_root_name()}'s forward to backward(); "
             "no GradScaler")


def _root_name() -> str:
    root = I.root() if I.root is not None else None
    return type(root).__name__ if root is not None else "the model"


def _enter_autocast() -> None:
    import torch

    if torch.is_autocast_enabled(I.device):
        knob = "bf16" if I.dtype is torch.bfloat16 else "fp16"
        note(f"{knob}: not applied to a forward already under the script's own autocast")
        return
    ctx = torch.autocast(I.device, dtype=I.dtype)
    if not getattr(ctx, "_enabled", True):  # torch warned: dtype not supported on this device
        note(f"{I.dtype}: autocast on {I.device} is not supported by this torch; not applied")
        I.dtype = None
        return
    ctx.__enter__()
    I.ctx = ctx


def _leave_autocast() -> None:
    ctx, I.ctx = I.ctx, None
    if ctx is not None:
        ctx.__exit__(None, None, None)


def _patch_backward(torch: Any) -> None:
    import torch.autograd as autograd

    inner = autograd.backward

    def backward(tensors, grad_tensors=None, *args, **kwargs):
        if not S.quiet and is_owner() and not _compiling():
            _leave_autocast()  # backward runs outside autocast
            if I.scaler is not None and not I.in_step:
                tensors = _scale(tensors, grad_tensors)
        return inner(tensors, grad_tensors, *args, **kwargs)

    backward.__doc__ = inner.__doc__
    backward.__wrapped__ = inner
    autograd.backward = backward


def _scale(tensors: Any, grad_tensors: Any) -> Any:
    import torch

    loss = tensors[0] if isinstance(tensors, (list, tuple)) and len(tensors) == 1 else tensors
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or grad_tensors is not None:
        note("fp16: a backward() of a non-scalar or with explicit gradients was not scaled")
        return tensors
    was_quiet, S.quiet = S.quiet, True
    try:
        scaled = I.scaler.scale(loss)
    finally:
        S.quiet = was_quiet
    I.scaled = True
    return scaled


def _scaled_step(optimizer: Any, *args: Any, **kwargs: Any) -> Any:
    """The trained optimizer's ``step`` under fp16: ``scaler.step`` then ``scaler.update``."""
    if I.in_step or args or kwargs or not I.scaled:
        if (args or kwargs) and not I.in_step:
            note("fp16: optimizer.step(closure) cannot go through a GradScaler; stepped unscaled")
        return I.orig_step(*args, **kwargs)  # inside scaler.step, a closure, or nothing scaled
    _leave_autocast()
    I.in_step = True
    try:
        result = I.scaler.step(optimizer)  # unscale_ if not done, skip on inf/NaN, else step
        I.scaler.update()
    finally:
        I.in_step = False
        I.scaled = I.unscaled = False
    return result


def _patch_clip(torch: Any) -> None:
    from torch.nn.utils import clip_grad

    for name in ("clip_grad_norm_", "clip_grad_value_"):
        inner = getattr(clip_grad, name)

        def clip(*args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
            if I.scaler is not None and I.scaled and not I.unscaled and not I.in_step:
                opt = I.opt() if I.opt is not None else None
                if opt is not None:
                    was_quiet, S.quiet = S.quiet, True
                    try:
                        I.scaler.unscale_(opt)  # clip the true gradients, not the scaled ones
                    finally:
                        S.quiet = was_quiet
                    I.unscaled = True
            return _inner(*args, **kwargs)

        clip.__name__, clip.__doc__, clip.__wrapped__ = name, inner.__doc__, inner
        setattr(clip_grad, name, clip)
        setattr(torch.nn.utils, name, clip)
