"""The engine's configuration: a tree of frozen, keyword-only dataclasses validated on creation.

Every field's type is checked first (``validation.check_fields``: no bool for an int, no 2.5
for an int, no NaN/inf, a section where a section belongs), then its range. Every
``ValueError`` names the key, the value and what to change. ``TrainConfig.from_file`` reads TOML or JSON (sections
named after the fields below); ``to_file`` writes the same shape back, so a config that ``gpudoctor
tune`` wrote can be read by the engine and a run's config can be stored next to its records.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
import typing
from pathlib import Path
from typing import Any, Literal

import tomli_w

from gpudoctor.records.atomic import write_text_atomic
from gpudoctor.train.validation import check_fields

_FROZEN = dict(frozen=True, kw_only=True, slots=True)


def _choice(name: str, value: object, options: tuple[str, ...]) -> None:
    if value not in options:
        raise ValueError(f"{name}={value!r} is not valid; use one of: {', '.join(options)}")


def _positive(name: str, value: float | int | None, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if value is None or value <= 0:
        raise ValueError(f"{name}={value!r} must be a positive number")


@dataclasses.dataclass(**_FROZEN)
class PrecisionConfig:
    """Numeric precision of the forward and backward passes.

    Attributes:
        dtype: ``auto`` (bf16 on a GPU that has it, else fp32), ``fp32``, ``tf32`` (fp32 weights,
            TF32 matmuls), ``bf16`` (autocast), ``fp16`` (autocast + GradScaler).
        grad_clip_norm: clip the global gradient norm to this value (after unscaling); ``None``: off.
        init_scale: GradScaler's first scale (fp16 only).
        growth_interval: steps without inf/NaN before the scale grows (fp16 only).
    """

    dtype: Literal["auto", "fp32", "tf32", "bf16", "fp16"] = "auto"
    grad_clip_norm: float | None = None
    init_scale: float = 2.0**16
    growth_interval: int = 2000

    def __post_init__(self) -> None:
        check_fields(self, "precision.")
        _choice("precision.dtype", self.dtype, ("auto", "fp32", "tf32", "bf16", "fp16"))
        _positive("precision.grad_clip_norm", self.grad_clip_norm, allow_none=True)
        _positive("precision.init_scale", self.init_scale)
        _positive("precision.growth_interval", self.growth_interval)


@dataclasses.dataclass(**_FROZEN)
class ParallelConfig:
    """How the model is spread over the ranks torchrun started.

    Attributes:
        strategy: ``auto`` (DDP when WORLD_SIZE > 1, else none), ``none``, ``ddp`` or ``fsdp`` (FSDP2).
        bucket_cap_mb: DDP gradient bucket size.
        gradient_as_bucket_view: DDP gradients alias the buckets (saves one gradient copy).
        static_graph: DDP static graph (safe when the same parameters are used every step).
        find_unused_parameters: DDP search for unused parameters each step (slow; only if needed).
        fsdp_shard_modules: class names of the submodules to shard one by one with FSDP2
            (e.g. ``("Block",)``); the root is always sharded.
        timeout_s: collective timeout; a hung rank fails after this instead of hanging forever.
        comm_hook: DDP gradient compression before the all-reduce: ``none``, ``fp16`` or
            ``bf16`` (PyTorch's default hooks). Measure it (``gpudoctor tune ddp``): on fast links
            the casts can cost more than the bytes they save.
        sync_batchnorm: under DDP/FSDP, convert every BatchNorm to ``SyncBatchNorm`` (statistics
            over the global batch, one all-reduce per BatchNorm layer per forward): for small
            per-GPU batches, where per-GPU statistics are noisy. A single process keeps BatchNorm.
    """

    strategy: Literal["auto", "none", "ddp", "fsdp"] = "auto"
    bucket_cap_mb: float = 25.0
    gradient_as_bucket_view: bool = True
    static_graph: bool = False
    find_unused_parameters: bool = False
    fsdp_shard_modules: tuple[str, ...] = ()
    timeout_s: float = 600.0
    comm_hook: Literal["none", "fp16", "bf16"] = "none"
    sync_batchnorm: bool = False

    def __post_init__(self) -> None:
        check_fields(self, "parallel.")
        _choice("parallel.strategy", self.strategy, ("auto", "none", "ddp", "fsdp"))
        _choice("parallel.comm_hook", self.comm_hook, ("none", "fp16", "bf16"))
        _positive("parallel.bucket_cap_mb", self.bucket_cap_mb)
        _positive("parallel.timeout_s", self.timeout_s)
        if self.static_graph and self.find_unused_parameters:
            raise ValueError(
                "parallel.static_graph and parallel.find_unused_parameters are both set; "
                "static_graph already handles unused parameters — keep only static_graph"
            )


@dataclasses.dataclass(**_FROZEN)
class PerfConfig:
    """Speed switches that do not change the maths (beyond float rounding).

    Attributes:
        compile: wrap the model in ``torch.compile``.
        compile_mode: ``torch.compile`` mode (``default``, ``reduce-overhead``, ``max-autotune``).
        channels_last: store 4-D activations and weights NHWC (convolution nets on tensor cores).
            ``None`` (the default) = on when training on a CUDA GPU a model that has a 2-D
            convolution, off otherwise; ``True``/``False`` force it. On an H200 ResNet-18 bf16 ran
            at 23.8k img/s NCHW vs 38.8k NHWC (benchmarks/results/peers-h200.json). Off under FSDP2
            (``fully_shard`` refuses NHWC weights); ``True`` with FSDP2 raises ``ValueError``.
        cudnn_benchmark: let cuDNN pick the fastest convolution algorithm per input shape.
        activation_checkpointing: class names of submodules to recompute in the backward pass
            (``use_reentrant=False``), trading compute for activation memory.
        deterministic: bitwise-repeatable runs: ``torch.use_deterministic_algorithms(True)``
            (an op with no deterministic kernel raises), ``cudnn.deterministic`` with
            ``cudnn.benchmark`` off, and ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` set before CUDA
            starts. It costs speed (no autotuned convolutions, slower deterministic kernels for
            scatter/index ops): measure it with tests/gpu/test_engine_switches_gpu.py. An op with
            no deterministic CUDA kernel raises (``torch.use_deterministic_algorithms`` lists them:
            ``AdaptiveAvgPool2d``'s backward, in every torchvision ResNet, and ``NLLLoss`` on CUDA);
        deterministic_warn_only: with ``deterministic``, such an op warns and runs instead
            (``use_deterministic_algorithms(True, warn_only=True)``): the run is then repeatable
            except for those ops.
    """

    compile: bool = False
    compile_mode: str = "default"
    channels_last: bool | None = None
    cudnn_benchmark: bool = True
    activation_checkpointing: tuple[str, ...] = ()
    deterministic: bool = False
    deterministic_warn_only: bool = False

    def __post_init__(self) -> None:
        check_fields(self, "perf.")
        if self.channels_last not in (None, True, False):
            raise ValueError(f"perf.channels_last={self.channels_last!r}: use true, false, or leave it out (auto)")
        _choice("perf.compile_mode", self.compile_mode, ("default", "reduce-overhead", "max-autotune",
                                                          "max-autotune-no-cudagraphs"))


@dataclasses.dataclass(**_FROZEN)
class CheckpointConfig:
    """Where and how often to save, and whether to resume.

    Attributes:
        dir: folder for checkpoints; ``None`` disables saving and resuming.
        every_steps: save every this many optimizer steps (and always at the end of ``fit``).
        keep_last: how many checkpoints to keep; older ones are deleted after a save succeeds.
        resume: ``auto`` (resume from the newest checkpoint in ``dir`` if there is one — what
            makes ``torchrun --max-restarts`` restarts continue by themselves) or ``never``.
    """

    dir: str | None = None
    every_steps: int | None = None
    keep_last: int = 3
    resume: Literal["auto", "never"] = "auto"

    def __post_init__(self) -> None:
        check_fields(self, "checkpoint.")
        _positive("checkpoint.every_steps", self.every_steps, allow_none=True)
        _positive("checkpoint.keep_last", self.keep_last)
        _choice("checkpoint.resume", self.resume, ("auto", "never"))
        if self.every_steps is not None and self.dir is None:
            raise ValueError("checkpoint.every_steps is set but checkpoint.dir is not; set dir to a folder")


@dataclasses.dataclass(**_FROZEN)
class RobustConfig:
    """What to do when a step runs out of memory or produces a non-finite loss.

    Attributes:
        oom_recover: on ``torch.OutOfMemoryError`` free memory, halve the micro-batch (keeping the
            effective batch by accumulation) and retry. ``None`` (auto): on for one process; under
            torchrun it costs one tiny all-reduce and host sync per step, so it must be asked for.
        min_micro_batch: give up (re-raise) rather than go below this many samples per micro-step.
        nonfinite: ``stop`` (checked lazily, no added sync: stops within two steps, before any
            checkpoint is written), ``skip`` (checked before each optimizer step: one host sync per
            step) or ``off``.
        max_skips: with ``skip``, raise ``NonFiniteLossError`` after this many consecutive skipped
            steps (naming the first and last of them): a run that trains nothing must not look done.
        oom_snapshot: what to keep of an out-of-memory error on a CUDA GPU (files per rank:
            ``oom-rank{N}.json`` and ``oom-snapshot-rank{N}.pickle``). ``on_oom`` (default):
            costs nothing until an OOM; every OOM writes the allocator figures (requested,
            allocated, reserved, free) and the live blocks, and a recovered OOM turns on
            allocation-history recording for the next 100 steps, so a repeat OOM is written
            with its allocation sites and the full snapshot for PyTorch's viewer. ``always``:
            record allocation history for the whole run (host time on every allocation), so
            even the first OOM has its sites. ``off``: write nothing.
        oom_dir: folder for those files; ``None``: ``checkpoint.dir`` if set, else
            ``gpudoctor-oom`` in the working directory.
    """

    oom_recover: bool | None = None
    min_micro_batch: int = 1
    nonfinite: Literal["stop", "skip", "off"] = "stop"
    max_skips: int = 10
    oom_snapshot: Literal["off", "on_oom", "always"] = "on_oom"
    oom_dir: str | None = None

    def __post_init__(self) -> None:
        check_fields(self, "robust.")
        _positive("robust.min_micro_batch", self.min_micro_batch)
        _choice("robust.nonfinite", self.nonfinite, ("stop", "skip", "off"))
        _positive("robust.max_skips", self.max_skips)
        _choice("robust.oom_snapshot", self.oom_snapshot, ("off", "on_oom", "always"))
        if self.oom_dir is not None and (not isinstance(self.oom_dir, str) or not self.oom_dir.strip()):
            raise ValueError(f"robust.oom_dir={self.oom_dir!r}: give a folder path, or leave it out "
                             "(checkpoint.dir, else ./gpudoctor-oom)")


@dataclasses.dataclass(**_FROZEN)
class LogConfig:
    """Progress output and metrics.

    Attributes:
        every_steps: reduce metrics across ranks and refresh the progress bar this often.
        progress_bar: show a rich progress bar on rank 0.
        flops_per_sample: forward+backward FLOPs of one sample; ``None``: counted once on the
            GPU with ``FlopCounterMode`` (MFU is reported only where the GPU's peak is known).
        warmup_steps: the first optimizer steps of each ``fit`` (compilation, cuDNN autotuning,
            loader workers starting) are start-up: throughput and MFU are measured over the
            steps after them, and the start-up time is reported on its own line.
    """

    every_steps: int = 50
    progress_bar: bool = True
    flops_per_sample: float | None = None
    warmup_steps: int = 3

    def __post_init__(self) -> None:
        check_fields(self, "log.")
        _positive("log.every_steps", self.every_steps)
        _positive("log.flops_per_sample", self.flops_per_sample, allow_none=True)
        _positive("log.warmup_steps", self.warmup_steps)


@dataclasses.dataclass(**_FROZEN)
class TrainConfig:
    """Everything ``Trainer`` needs besides the model, optimizer, loss and data.

    Attributes:
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (see ``core.device.select_device``).
        batch_size: per-device batch, used when ``fit`` is given a Dataset instead of a loader.
        grad_accum_steps: loader batches per optimizer step (per rank).
        max_steps: stop after this many optimizer steps in total (``None``: run all epochs).
        seed: seed for torch/python RNGs at the start of ``fit`` (``None``: leave them alone).
        lr_scaling: scale the optimizer's learning rates by the effective global batch over
            ``base_batch_size``: ``none``, ``linear`` or ``sqrt``.
        base_batch_size: the batch size the learning rates were tuned for (needed for scaling).
    """

    device: str = "auto"
    batch_size: int | None = None
    grad_accum_steps: int = 1
    max_steps: int | None = None
    seed: int | None = 0
    lr_scaling: Literal["none", "linear", "sqrt"] = "none"
    base_batch_size: int | None = None
    precision: PrecisionConfig = dataclasses.field(default_factory=PrecisionConfig)
    parallel: ParallelConfig = dataclasses.field(default_factory=ParallelConfig)
    perf: PerfConfig = dataclasses.field(default_factory=PerfConfig)
    checkpoint: CheckpointConfig = dataclasses.field(default_factory=CheckpointConfig)
    robust: RobustConfig = dataclasses.field(default_factory=RobustConfig)
    log: LogConfig = dataclasses.field(default_factory=LogConfig)

    def __post_init__(self) -> None:
        check_fields(self, "")
        _positive("grad_accum_steps", self.grad_accum_steps)
        _positive("batch_size", self.batch_size, allow_none=True)
        _positive("max_steps", self.max_steps, allow_none=True)
        _choice("lr_scaling", self.lr_scaling, ("none", "linear", "sqrt"))
        if self.lr_scaling != "none" and self.base_batch_size is None:
            raise ValueError(
                f"lr_scaling={self.lr_scaling!r} needs base_batch_size: the global batch size the "
                "learning rate was tuned for"
            )
        _positive("base_batch_size", self.base_batch_size, allow_none=True)

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Build from nested plain data; unknown keys raise ``ValueError`` listing the valid ones."""
        return _build(cls, data, "")

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)

    @classmethod
    def from_file(cls, path: str | Path) -> TrainConfig:
        """Read a ``.toml`` or ``.json`` file."""
        path = Path(path)
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".toml":
            return cls.from_dict(tomllib.loads(text))
        if path.suffix == ".json":
            return cls.from_dict(json.loads(text))
        raise ValueError(f"{path}: config files must end in .toml or .json")

    def to_file(self, path: str | Path) -> None:
        """Write a ``.toml`` or ``.json`` file that ``from_file`` reads back to an equal config."""
        path = Path(path)
        if path.suffix == ".json":
            write_text_atomic(path, json.dumps(self.to_dict(), indent=2) + "\n")
        elif path.suffix == ".toml":
            text = tomli_w.dumps(_without_none(self.to_dict()))
            if TrainConfig.from_dict(tomllib.loads(text)) != self:  # TOML cannot say "None"
                raise ValueError(f"{path}: this config has a None TOML cannot hold; save it as .json")
            write_text_atomic(path, text)
        else:
            raise ValueError(f"{path}: config files must end in .toml or .json")


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple):
        return list(obj)
    return obj


def _build(cls: type, data: dict[str, Any], prefix: str) -> Any:
    if not isinstance(data, dict):
        raise ValueError(f"{prefix.rstrip('.') or 'config'} must be a table/mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(
            f"unknown setting(s) {', '.join(prefix + u for u in unknown)}; "
            f"valid here: {', '.join(sorted(names))}"
        )
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint) and isinstance(value, dict):
            kwargs[name] = _build(hint, value, f"{prefix}{name}.")
        else:  # a section given a plain value is refused by the type check with the fix
            kwargs[name] = value
    return cls(**kwargs)


def _without_none(data: dict[str, Any]) -> dict[str, Any]:
    """TOML has no null: an absent key means the default (``to_file`` checks the round trip)."""
    return {k: _without_none(v) if isinstance(v, dict) else v for k, v in data.items() if v is not None}
