"""``--try`` knobs: safe, reversible changes injected into an unmodified script.

A knob spec is ``NAME`` or ``NAME=VALUE``, several joined by commas:

==========================  ===================================================================
``num_workers=N``           every ``DataLoader`` gets ``num_workers=N`` (not for an
                            ``IterableDataset``, where extra workers would repeat the data)
``pin_memory``              ``pin_memory=True``
``persistent_workers``      ``persistent_workers=True`` (only where ``num_workers > 0``)
``prefetch_factor=N``       ``prefetch_factor=N`` (only where ``num_workers > 0``)
``non_blocking``            ``Tensor.to(...)``/``.cuda()`` of a pinned host tensor without a
                            ``non_blocking`` argument get ``non_blocking=True``
``tf32``                    ``torch.backends.cuda.matmul.allow_tf32 = cudnn.allow_tf32 = True``
``cudnn_benchmark``         ``torch.backends.cudnn.benchmark = True``
``expandable_segments``     ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` (merged with
                            any value already set)
``bf16``                    ``torch.autocast(device, dtype=torch.bfloat16)`` from the first
                            forward of the trained model in a step to ``backward()``: the
                            forward and the loss run under autocast, backward and the
                            optimizer step outside it; no GradScaler. On a CPU run the
                            device is ``"cpu"`` (CPU autocast supports bf16)
``fp16``                    the same with ``torch.float16``, plus a ``GradScaler`` in the
                            right order: ``scale(loss)`` -> backward -> ``unscale_`` (before
                            ``clip_grad_norm_``/``clip_grad_value_``, else inside ``step``)
                            -> clip -> ``scaler.step`` -> ``scaler.update``
``channels_last``           ``model.to(memory_format=torch.channels_last)`` on the trained
                            model when it has 4-D (convolution) weights; the model's 4-D
                            floating-point inputs are converted in its forward
``compile``                 ``torch.compile`` of the trained model's ``forward`` (the first
                            step runs eagerly; compilation happens in the warm-up steps)
==========================  ===================================================================

"The trained model" is the outermost ``nn.Module`` called after an optimizer exists whose
parameters include every parameter of that optimizer (under DDP the ``DistributedDataParallel``
wrapper; ``channels_last`` and ``compile`` then act on its ``.module``). A script that already
uses autocast or a GradScaler, or is already compiled, keeps its own; a knob that cannot apply
(no convolution weights for ``channels_last``, ``tf32`` on a CPU run, ``non_blocking`` with no
pinned copy) is not silent: each rank's ``config-rank{N}.json`` lists, in ``knob_notes``, what
each knob did or why it did nothing, and the ``--try`` table prints those lines.

The launcher validates the spec (:func:`parse_knobs`) and passes it on in ``GPUDOCTOR_KNOBS``;
the probes apply it in the child (:func:`apply_from_env`). The DataLoader knobs act in
``DataLoader.__init__``, so they override what the script passed. The flag knobs are set when
torch is imported; a script that sets the flag itself afterwards wins. The model knobs live in
:mod:`gpudoctor.collectors.instrument.inject`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from gpudoctor.errors import GpuDoctorUserError

ENV_KNOBS = "GPUDOCTOR_KNOBS"

# name -> (takes an integer value, minimum)
KNOBS: dict[str, tuple[bool, int]] = {
    "num_workers": (True, 0),
    "prefetch_factor": (True, 1),
    "pin_memory": (False, 0),
    "persistent_workers": (False, 0),
    "non_blocking": (False, 0),
    "tf32": (False, 0),
    "cudnn_benchmark": (False, 0),
    "expandable_segments": (False, 0),
    "bf16": (False, 0),
    "fp16": (False, 0),
    "channels_last": (False, 0),
    "compile": (False, 0),
}
LOADER_KNOBS = ("num_workers", "prefetch_factor", "pin_memory", "persistent_workers")
MODEL_KNOBS = ("bf16", "fp16", "channels_last", "compile", "non_blocking")
GPU_ONLY_KNOBS = ("tf32", "cudnn_benchmark", "expandable_segments", "pin_memory", "non_blocking")
# Knobs whose first steps pay a one-off cost (compilation): a run that tries them needs more
# steps so that the steady steps after warm-up are not dominated by it (see cli/run.py).
SLOW_WARMUP_KNOBS = ("compile",)
# How long a run that tries such a knob may go without an optimizer step once it has started:
# recompilation in the first steps (the backward's first compile, dynamo's automatic dynamic shapes)
# pauses the steps for tens of seconds. minGPT's chargpt on an H200 (issue 24): the patched copy with
# model.compile() went 30 s without a step after step 1 and the default 30 s limit stopped it.
SLOW_WARMUP_STALL_S = 300.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Knob:
    """One knob: ``name`` and, for the integer knobs, ``value``."""

    name: str
    value: int | None = None

    def __post_init__(self) -> None:
        if self.name not in KNOBS:
            raise ValueError(
                f"unknown knob {self.name!r}; choose from {', '.join(sorted(KNOBS))} "
                "(e.g. --try num_workers=8,pin_memory)"
            )
        takes_value, minimum = KNOBS[self.name]
        if takes_value and self.value is None:
            raise ValueError(f"knob {self.name} needs a value, e.g. {self.name}=8")
        if not takes_value and self.value is not None:
            raise ValueError(f"knob {self.name} takes no value; write just {self.name}")
        if takes_value and self.value is not None and self.value < minimum:
            raise ValueError(f"knob {self.name}={self.value} must be at least {minimum}")

    def __str__(self) -> str:
        return self.name if self.value is None else f"{self.name}={self.value}"


def parse_knobs(spec: str) -> tuple[Knob, ...]:
    """Parse ``"num_workers=8,pin_memory"``; raise :class:`GpuDoctorUserError` saying what to fix."""
    knobs: list[Knob] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        name, sep, raw = part.partition("=")
        name = name.strip().replace("-", "_")
        value: int | None = None
        if sep:
            try:
                value = int(raw.strip())
            except ValueError:
                raise GpuDoctorUserError(f"--try {part}: {raw!r} is not a whole number") from None
        try:
            knob = Knob(name=name, value=value)
        except ValueError as exc:
            raise GpuDoctorUserError(f"--try: {exc}") from None
        if any(k.name == knob.name for k in knobs):
            raise GpuDoctorUserError(f"--try: knob {knob.name} given twice")
        knobs.append(knob)
    if not knobs:
        raise GpuDoctorUserError("--try needs at least one knob, e.g. --try num_workers=8,pin_memory")
    if {"bf16", "fp16"} <= {k.name for k in knobs}:
        raise GpuDoctorUserError("--try: bf16 and fp16 exclude each other; try one, then the other")
    return tuple(knobs)


def child_env(knobs: tuple[Knob, ...], environ: dict[str, str]) -> dict[str, str]:
    """The environment changes the knobs need in the child (``GPUDOCTOR_KNOBS``, alloc conf)."""
    env = {ENV_KNOBS: ",".join(str(k) for k in knobs)}
    if any(k.name == "expandable_segments" for k in knobs):
        current = environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
        parts = [p for p in current.split(",") if p and not p.startswith("expandable_segments")]
        env["PYTORCH_CUDA_ALLOC_CONF"] = ",".join([*parts, "expandable_segments:True"])
    return env


def apply_from_env() -> tuple[Knob, ...]:
    """In the child: apply the knobs named in ``GPUDOCTOR_KNOBS`` (after ``import torch``)."""
    spec = os.environ.get(ENV_KNOBS, "")
    if not spec:
        return ()
    knobs = parse_knobs(spec)
    import torch

    names = {k.name: k.value for k in knobs}
    if "tf32" in names:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if "cudnn_benchmark" in names:
        torch.backends.cudnn.benchmark = True
    loader_knobs = {n: v for n, v in names.items() if n in LOADER_KNOBS}
    if loader_knobs:
        _patch_loader_init(torch, loader_knobs)
    from gpudoctor.collectors.instrument import inject

    inject.install(tuple(names))
    return knobs


def loader_kwargs(kwargs: dict[str, Any], knobs: dict[str, int | None], *, iterable: bool) -> dict[str, Any]:
    """Return ``kwargs`` of a ``DataLoader(...)`` call with the knobs applied, keeping it valid."""
    out = dict(kwargs)
    if "num_workers" in knobs and not iterable:
        out["num_workers"] = knobs["num_workers"]
    if "pin_memory" in knobs:
        out["pin_memory"] = True
    workers = int(out.get("num_workers", 0) or 0)
    if workers > 0:
        if "persistent_workers" in knobs:
            out["persistent_workers"] = True
        if "prefetch_factor" in knobs:
            out["prefetch_factor"] = knobs["prefetch_factor"]
    elif "num_workers" in knobs and not iterable:
        # Forced down to 0 workers: these two are only valid with workers; DataLoader would raise.
        out["persistent_workers"] = False
        out["prefetch_factor"] = None
    return out


LOADERS_BUILT = [0]  # DataLoader(...) calls the loader knobs reached in this process (none: not applied)


def _patch_loader_init(torch: Any, knobs: dict[str, int | None]) -> None:
    import inspect

    from torch.utils.data import DataLoader, IterableDataset

    orig_init = DataLoader.__init__
    signature = inspect.signature(orig_init)

    def __init__(self, *args, **kwargs):
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError:
            return orig_init(self, *args, **kwargs)  # let DataLoader report the bad call
        given = dict(bound.arguments)
        given.pop("self")
        extra = given.pop("kwargs", {})
        iterable = isinstance(given.get("dataset"), IterableDataset)
        LOADERS_BUILT[0] += 1
        return orig_init(self, **loader_kwargs({**given, **extra}, knobs, iterable=iterable))

    __init__.__wrapped__ = orig_init
    DataLoader.__init__ = __init__
