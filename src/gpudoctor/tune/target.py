"""What ``gpudoctor tune`` tunes: a :class:`TuneTarget` named on the command line as
``module:function`` (or ``path/to/file.py:function``).

The function takes no arguments and returns a ``TuneTarget``::

    from gpudoctor.tune.target import TuneTarget

    def target() -> TuneTarget:
        return TuneTarget(
            model_factory=lambda: torchvision.models.resnet18(num_classes=10),
            optimizer_factory=lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
            loss_fn=torch.nn.CrossEntropyLoss(),
            train_dataset=train_set,
            eval_dataset=val_set,
            config=TrainConfig(batch_size=128),
        )

Every trial builds a fresh model and optimizer from the factories, so one trial's weights,
optimizer state or compiled graph never leak into the next. The tuned settings are written as two
files: the engine configuration (``TrainConfig.from_file`` reads it) and the loader settings
(:meth:`LoaderSettings.from_file`; ``fast_loader`` takes them as arguments).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import sys
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from gpudoctor.errors import GpuDoctorUserError
from gpudoctor.train.config import TrainConfig


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class LoaderSettings:
    """DataLoader settings the loader knob tunes (``None``: the engine's default).

    Attributes:
        num_workers: worker processes per rank (``None``: ``default_num_workers``).
        prefetch_factor: batches each worker keeps ready (only with workers).
        pin_memory: page-locked batches (``None``: pin when CUDA is available).
        persistent_workers: keep the workers between epochs (only with workers).
        eval_batch_size: per-device batch of the evaluation loader (``None``: the train batch).
        multiprocessing_context: how workers start (``None``: the platform's default, ``fork``
            on Linux; ``"forkserver"``: workers that do not inherit the parent's memory).
    """

    num_workers: int | None = None
    prefetch_factor: int = 4
    pin_memory: bool | None = None
    persistent_workers: bool = True
    eval_batch_size: int | None = None
    multiprocessing_context: str | None = None

    def __post_init__(self) -> None:
        if self.num_workers is not None and self.num_workers < 0:
            raise ValueError(f"loader.num_workers={self.num_workers} must be >= 0")
        if self.prefetch_factor < 1:
            raise ValueError(f"loader.prefetch_factor={self.prefetch_factor} must be >= 1")
        if self.eval_batch_size is not None and self.eval_batch_size < 1:
            raise ValueError(f"loader.eval_batch_size={self.eval_batch_size} must be >= 1")
        if self.multiprocessing_context not in (None, "fork", "spawn", "forkserver"):
            raise ValueError(f"loader.multiprocessing_context={self.multiprocessing_context!r}: use fork, spawn "
                             "or forkserver, or leave it out")

    def replace(self, **changes: Any) -> LoaderSettings:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoaderSettings:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown loader setting(s) {', '.join(unknown)}; valid: {', '.join(sorted(names))}")
        return cls(**data)

    def to_file(self, path: str | Path) -> None:
        """Write ``[loader]`` TOML (``None`` values are left out: they mean the default)."""
        lines = ["[loader]"]
        for key, value in self.to_dict().items():
            if value is None:
                continue
            lines.append(f"{key} = {json.dumps(value)}")
        Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")

    @classmethod
    def from_file(cls, path: str | Path) -> LoaderSettings:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        return cls.from_dict(data.get("loader", {}))


@dataclasses.dataclass(frozen=True, kw_only=True)
class TuneTarget:
    """Everything a trial needs to build and train the user's job.

    Attributes:
        model_factory: returns a fresh ``nn.Module`` (called once per trial).
        optimizer_factory: ``params -> optimizer`` (called once per trial).
        loss_fn: ``loss_fn(outputs, target)``, mean-reduced.
        train_dataset: a map-style dataset yielding ``(inputs, target)``.
        eval_dataset: the evaluation dataset (its batch is probed separately), or ``None``.
        config: the starting ``TrainConfig`` (its ``batch_size`` is the batch to beat).
        loader: the starting loader settings.
        unpack: splits a batch into ``(inputs, target)`` (the engine's default when ``None``).
    """

    model_factory: Callable[[], Any]
    optimizer_factory: Callable[[Iterable[Any]], Any]
    loss_fn: Callable[[Any, Any], Any]
    train_dataset: Any
    eval_dataset: Any = None
    config: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    loader: LoaderSettings = dataclasses.field(default_factory=LoaderSettings)
    unpack: Callable[[Any], tuple[Any, Any]] | None = None

    def __post_init__(self) -> None:
        for name in ("model_factory", "optimizer_factory", "loss_fn"):
            if not callable(getattr(self, name)):
                raise ValueError(f"TuneTarget.{name} must be callable")
        if not hasattr(self.train_dataset, "__getitem__") or not hasattr(self.train_dataset, "__len__"):
            raise ValueError("TuneTarget.train_dataset must be a map-style dataset (__getitem__ and __len__)")
        if len(self.train_dataset) == 0:
            raise ValueError("TuneTarget.train_dataset is empty; give the tuner real samples")


def load_target(ref: str) -> TuneTarget:
    """Import ``module:function`` or ``path/file.py:function`` and call it.

    Raises:
        GpuDoctorUserError: the reference is malformed, cannot be imported, or does not return a
            ``TuneTarget`` — worded with what to write instead.
    """
    module_name, sep, func_name = ref.rpartition(":")
    if not sep or not module_name or not func_name:
        raise GpuDoctorUserError(
            f"--target {ref!r}: write module:function or path/to/file.py:function, e.g. --target mytrain:target"
        )
    try:
        if module_name.endswith(".py"):
            path = Path(module_name).resolve()
            if not path.is_file():
                raise GpuDoctorUserError(f"--target {ref!r}: {path} does not exist")
            name = f"_gpudoctor_target_{path.stem}"
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
            sys.modules[name] = module
            spec.loader.exec_module(module)  # type: ignore[union-attr]
        else:
            module = importlib.import_module(module_name)
    except GpuDoctorUserError:
        raise
    except ImportError as exc:
        raise GpuDoctorUserError(
            f"--target {ref!r}: cannot import {module_name} ({exc}); run from the folder that holds it "
            "or add it to PYTHONPATH"
        ) from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise GpuDoctorUserError(f"--target {ref!r}: {module_name} has no function {func_name}")
    target = func()
    if not isinstance(target, TuneTarget):
        raise GpuDoctorUserError(
            f"--target {ref!r}: {func_name}() returned {type(target).__name__}, not a "
            "gpudoctor.tune.target.TuneTarget (see docs/tune.md)"
        )
    return target


def loader_path_for(config_path: str | Path) -> Path:
    """``tuned.toml`` -> ``tuned.loader.toml``: where the loader settings go next to the config."""
    path = Path(config_path)
    return path.with_name(f"{path.stem}.loader.toml")


def write_outputs(config: TrainConfig, loader: LoaderSettings, path: str | Path) -> tuple[Path, Path]:
    """Write the engine config to ``path`` (``.toml`` or ``.json``; a TOML that cannot hold a
    ``None`` falls back to ``.json`` next to it) and the loader settings beside it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        config.to_file(path)
    except ValueError:
        if path.suffix != ".toml":
            raise
        path = path.with_suffix(".json")
        config.to_file(path)
    loader_path = loader_path_for(path)
    loader.to_file(loader_path)
    return path, loader_path
