"""Checkpoints that survive a crash mid-write and resume exactly.

A save writes ``step-XXXXXXXX.pt.tmp``, flushes and fsyncs it, renames it over the final name
(atomic on POSIX) and fsyncs the folder, so a crash leaves either the previous checkpoint or the
new one, never half a file. Only rank 0 writes; every rank's RNG states travel in the same file.
Loading uses ``torch.load(weights_only=True)``: a checkpoint cannot run code.

What is saved: model (without ``module.``/``_orig_mod.`` prefixes; full state even under FSDP2),
optimizer, GradScaler, LR scheduler, progress (epoch, step, batches consumed this epoch, micro-batch
split), the RNG states of every rank (torch CPU, this rank's CUDA device, Python, NumPy) and the RNG state at the start
of the current epoch (so a loader's shuffle can be replayed).
"""

from __future__ import annotations

import os
import random
import re
import sys
from pathlib import Path
from typing import Any

import torch

_NAME = re.compile(r"^step-(\d{8})\.pt$")
_PREFIXES = ("module.", "_orig_mod.")


def strip_prefixes(state: dict[str, Any]) -> dict[str, Any]:
    """Remove DDP ``module.`` and ``torch.compile`` ``_orig_mod.`` prefixes from state-dict keys."""
    out = {}
    for key, value in state.items():
        changed = True
        while changed:
            changed = False
            for p in _PREFIXES:
                if key.startswith(p):
                    key, changed = key[len(p):], True
        out[key] = value
    return out


def load_model_state(model: torch.nn.Module, state: dict[str, Any], *, strict: bool = True) -> None:
    """Load ``state`` into ``model`` whichever side has the ``module.`` prefix (seed 001 §4).

    A checkpoint saved from a DDP wrapper loads into a bare model and the other way round.
    """
    from gpudoctor.train.parallel import unwrap

    unwrap(model).load_state_dict(strip_prefixes(state), strict=strict)


def _bytes(t: torch.Tensor) -> list[int]:
    return t.tolist()


def _tensor(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.uint8)


def rng_state() -> dict[str, Any]:
    """This process's RNG states as plain lists and tuples: they survive ``all_gather_object`` and
    ``torch.load(weights_only=True)``."""
    state: dict[str, Any] = {"torch": _bytes(torch.get_rng_state()), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = _bytes(torch.cuda.get_rng_state())  # this rank's device only
    np = sys.modules.get("numpy")
    if np is not None:
        kind, keys, pos, has_gauss, gauss = np.random.get_state()
        state["numpy"] = (str(kind), [int(k) for k in keys], int(pos), int(has_gauss), float(gauss))
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(_tensor(state["torch"]))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(_tensor(state["cuda"]))
    np = sys.modules.get("numpy")
    if np is not None and "numpy" in state:
        kind, keys, pos, has_gauss, gauss = state["numpy"]
        np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_save(obj: Any, path: Path) -> None:
    """``torch.save`` to ``path`` so that a crash at any moment leaves the old file or the new one."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def list_checkpoints(folder: str | Path) -> list[Path]:
    """Complete checkpoints in ``folder``, oldest first (``*.tmp`` leftovers are ignored)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def latest_checkpoint(folder: str | Path) -> Path | None:
    found = list_checkpoints(folder)
    return found[-1] if found else None


def prune(folder: str | Path, keep_last: int) -> list[Path]:
    """Delete all but the newest ``keep_last`` checkpoints (and stale ``.tmp`` files); return what went."""
    found = list_checkpoints(folder)
    gone = found[:-keep_last] if keep_last else found
    gone += [p for p in Path(folder).glob("step-*.pt.tmp")]
    for p in gone:
        p.unlink(missing_ok=True)
    return gone


def checkpoint_path(folder: str | Path, step: int) -> Path:
    return Path(folder) / f"step-{step:08d}.pt"


def load(path: str | Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by :func:`atomic_save` (weights only: no code runs)."""
    return torch.load(path, map_location=device, weights_only=True)


def model_state(model: torch.nn.Module, sharded: bool) -> dict[str, Any]:
    """The full, prefix-free model state. Under FSDP2 every rank must call it (a collective) and
    only rank 0 receives the gathered state, on the CPU; the others get an empty dict."""
    if sharded:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    from gpudoctor.train.parallel import unwrap

    return strip_prefixes(unwrap(model).state_dict())


def optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, sharded: bool) -> dict[str, Any]:
    if sharded:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        return get_optimizer_state_dict(
            model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
    return optimizer.state_dict()


def restore_model_and_optimizer(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                                state: dict[str, Any], sharded: bool) -> None:
    """Put saved model and optimizer states back (each rank loads the full state it read)."""
    if sharded:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        options = StateDictOptions(full_state_dict=True)
        set_model_state_dict(model, state["model"], options=options)
        set_optimizer_state_dict(model, optimizer, state["optimizer"], options=options)
        return
    load_model_state(model, state["model"])
    optimizer.load_state_dict(state["optimizer"])
