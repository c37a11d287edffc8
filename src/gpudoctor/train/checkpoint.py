"""Checkpoints that survive a crash mid-write and resume exactly.

A save goes through :func:`gpudoctor.records.atomic.atomic_file`: it writes
``step-XXXXXXXX.pt.<pid>-<random>.tmp`` (a name of its own, so two trainers sharing a folder never
write the same temp file), flushes and fsyncs it, renames it over the final name (atomic on POSIX)
and fsyncs the folder, so a crash leaves either the previous checkpoint or
the new one, never half a file. Beside it goes ``<name>.sha256`` (``sha256sum -c`` reads it), checked
at load: bytes that changed after the write (a flipped bit in the tensor data loads without
complaint otherwise) count as a corrupt file. A save that fails (disk full, no permission) removes its temp file
and says why. Only rank 0 writes; every rank's RNG states travel in the same file. Loading uses
``torch.load(weights_only=True)``: a checkpoint cannot run code.

Resume heals: :func:`load_newest` reads the newest checkpoint that reads; one that does not
(truncated, corrupt, not a checkpoint) is named in a warning, renamed ``*.corrupt`` (kept for a
person to look at, no longer in the way) and the next older one is tried. When checkpoints exist
but none reads, it raises :class:`CheckpointLoadError` and moves nothing: a silent restart from
step 0 would throw the progress away. Extras that ``weights_only`` could not read back are refused
at save (:func:`plain_extras`), not discovered at resume.

What is saved: model (without ``module.``/``_orig_mod.`` prefixes; full state even under FSDP2),
optimizer, GradScaler, LR scheduler, progress (epoch, step, batches consumed this epoch, micro-batch
split), the RNG states of every rank (torch CPU, this rank's CUDA device, Python, NumPy) and the RNG state at the start
of the current epoch (so a loader's shuffle can be replayed).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import hashlib
import os
import random
import re
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from gpudoctor.records.atomic import atomic_file, write_text_atomic

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


_WHY = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exhausted",
        errno.EACCES: "permission denied", errno.EPERM: "permission denied",
        errno.EROFS: "the file system is read-only"}
STALE_TMP_S = 3600  # another writer's temp file this old is a crash leftover: prune removes it
# A temp file whose writer's pid is gone is a leftover once untouched this long: a writer keeps
# touching its file, and on a folder shared across hosts a pid from another host means nothing here.
DEAD_TMP_GRACE_S = 60
_TMP_PID = re.compile(r"\.(\d+)-[0-9a-f]{8}\.tmp$")


class CheckpointSaveError(OSError):
    """A checkpoint could not be written; the message says why and what to do."""


class CheckpointChecksumError(ValueError):
    """A checkpoint's bytes do not match the checksum written beside it."""


def sidecar(path: Path) -> Path:
    """The checksum file beside a checkpoint: ``<name>.sha256``."""
    return path.with_name(path.name + ".sha256")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def verify(path: Path) -> None:
    """Check ``path`` against its ``.sha256`` file; none (older checkpoints, or a crash between
    the two renames) passes unverified.

    Raises:
        CheckpointChecksumError: the bytes differ from those written, or the checksum file is unreadable.
    """
    side = sidecar(path)
    try:
        words = side.read_text(encoding="ascii").split()
    except FileNotFoundError:
        return
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointChecksumError(f"its checksum file {side.name} is unreadable ({exc})") from exc
    got = file_sha256(path)
    if not words or words[0].lower() != got:
        raise CheckpointChecksumError(f"its bytes changed after it was written: sha256 {got[:16]}... differs "
                                      f"from {side.name}")


class CheckpointLoadError(RuntimeError):
    """Checkpoints were found but none loads; the message names each file, why, and what to do."""


# What torch.load(weights_only=True) reads back (its unpickler's allow-list), by exact type: a
# subclass (an Enum, a namedtuple, a Path) pickles as its own class and is refused at load.
_PLAIN = (bool, int, float, complex, str, bytes, bytearray, type(None),
          torch.Tensor, torch.nn.Parameter, torch.Size, torch.device, torch.dtype)
_MAPPINGS = (dict, collections.OrderedDict, collections.Counter)
_SEQUENCES = (list, tuple, set)


def plain_extras(extra: dict[str, Any]) -> dict[str, Any]:
    """``extra`` as data that ``torch.load(weights_only=True)`` reads back: NumPy scalars become
    Python numbers; anything else outside the allow-list raises ``TypeError`` naming the entry and
    what to pass instead (saved, it would make every later resume fail)."""
    return {key: _plain(value, key) for key, value in extra.items()}


def _plain(value: Any, where: str) -> Any:
    kind = type(value)
    if kind in _PLAIN:
        return value
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.generic):  # np.float64, np.int64, np.bool_...
        return _plain(value.item(), where)
    if kind in _MAPPINGS:
        out = {_plain(k, f"a key of {where}"): _plain(v, f"{where}[{k!r}]") for k, v in value.items()}
        return out if kind is dict else kind(out)
    if kind in _SEQUENCES:
        return kind(_plain(v, f"{where}[{i}]") for i, v in enumerate(value))
    if isinstance(value, os.PathLike):
        hint = "pass str(...) of it"
    elif np is not None and isinstance(value, np.ndarray):
        hint = "pass torch.from_numpy(...) or .tolist() of it"
    elif hasattr(value, "__dataclass_fields__"):
        hint = "pass dataclasses.asdict(...) of it"
    elif hasattr(value, "state_dict"):
        hint = "pass its .state_dict()"
    else:
        hint = "pass plain data: tensors, numbers, strings, bool, None, and dicts, lists or tuples of them"
    raise TypeError(f"checkpoint extra {where} is a {kind.__module__}.{kind.__qualname__}, which "
                    f"torch.load(weights_only=True) cannot read back, so resuming would fail; {hint}")


def atomic_save(obj: Any, path: Path) -> None:
    """``torch.save`` to ``path`` so that a crash at any moment leaves the old file or the new one.

    Raises:
        CheckpointSaveError: the write failed (its temp file is removed; the message names the
            cause: disk full, permissions, read-only file system).
    """
    path = Path(path)
    sidecar(path).unlink(missing_ok=True)  # an old one must never condemn the new file
    try:
        with atomic_file(path) as f:
            torch.save(obj, f)
    except BaseException as exc:  # atomic_file removed its temp file
        if isinstance(exc, OSError) or isinstance(exc.__context__, OSError):
            err = exc if isinstance(exc, OSError) else exc.__context__
            why = _WHY.get(getattr(err, "errno", None), str(err))
            raise CheckpointSaveError(
                getattr(err, "errno", None) or 0,
                f"could not write checkpoint {path}: {why} ({type(exc).__name__}: {exc}); the partial file "
                "was removed and the previous checkpoints are untouched. Free space or fix the folder's "
                "permissions, or point checkpoint.dir elsewhere") from exc
        if isinstance(exc, RuntimeError) and "write" in str(exc).lower():  # torch.save's zip writer
            raise CheckpointSaveError(
                0, f"could not write checkpoint {path}: {exc}; the partial file was removed (often: the disk "
                "is full). Free space or point checkpoint.dir elsewhere") from exc
        raise
    try:
        write_text_atomic(sidecar(path), f"{file_sha256(path)}  {path.name}\n")
    except OSError as exc:
        warnings.warn(f"checkpoint {path} was written but its checksum file could not be ({exc}); it will "
                      "load unverified", RuntimeWarning, stacklevel=2)


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
    """Delete all but the newest ``keep_last`` checkpoints (with their checksum files) and crash
    leftovers; return what went.

    A leftover temp file is this process's own, one whose writer (the pid in its name) is no
    longer alive and that is untouched for :data:`DEAD_TMP_GRACE_S`, or one older than
    :data:`STALE_TMP_S`: a temp file another trainer is writing right now is left alone."""
    found = list_checkpoints(folder)
    gone = found[:-keep_last] if keep_last else found
    now, mine = time.time(), f".{os.getpid()}-"
    for p in Path(folder).glob("step-*.tmp"):
        try:
            age = now - p.stat().st_mtime
        except FileNotFoundError:
            continue
        m = _TMP_PID.search(p.name)
        dead = m is not None and age > DEAD_TMP_GRACE_S and not _alive(int(m.group(1)))
        old_name = p.name.endswith(".pt.tmp")  # the fixed temp name of older versions
        if age > STALE_TMP_S or dead or mine in p.name or old_name:
            gone.append(p)
    gone += [side for p in gone if (side := sidecar(p)).exists()]
    for p in gone:
        p.unlink(missing_ok=True)
    return gone


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists here (another user's counts: kill says EPERM)."""
    if pid <= 0:
        return True  # not a pid a writer has; keep the file
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def checkpoint_path(folder: str | Path, step: int) -> Path:
    return Path(folder) / f"step-{step:08d}.pt"


def load(path: str | Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by :func:`atomic_save` (weights only: no code runs), checked against
    its ``.sha256`` file when it has one (:func:`verify`)."""
    path = Path(path)
    verify(path)
    return torch.load(path, map_location=device, weights_only=True)


def load_newest(folder: str | Path, device: torch.device | str = "cpu") -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint in ``folder`` that reads, as ``(path, state)``; ``None`` if there are none.

    A file that does not read (truncated: ``EOFError``/``OSError``/zip errors; corrupt:
    ``UnpicklingError`` or a checksum mismatch; anything else ``torch.load`` raises; no model state) is skipped for the
    next older one; once one reads, each skipped file is named in a ``RuntimeWarning`` and renamed
    ``<name>.corrupt`` so later restarts do not trip over it again. Several ranks may do this at
    once: a file another rank already moved is skipped.

    Raises:
        CheckpointLoadError: checkpoints exist but none reads (each named with why; none is moved,
            so a restart stops here again rather than training from step 0).
    """
    failed: list[tuple[Path, str]] = []
    for path in reversed(list_checkpoints(folder)):
        try:
            state = load(path, device)
        except FileNotFoundError:
            continue  # another rank moved it aside a moment ago
        except Exception as exc:  # noqa: BLE001 - whatever torch.load raises, the file does not load
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            failed.append((path, f"{type(exc).__name__}: {first[:200]}"))
            continue
        if not isinstance(state, dict) or "model" not in state:
            failed.append((path, "it holds no model state"))
            continue
        for bad, why in failed:
            _move_aside(bad, why)
        return path, state
    if failed:
        lines = "".join(f"\n  {p.name}: {why}" for p, why in failed)
        raise CheckpointLoadError(
            f"{len(failed)} checkpoint(s) in {Path(folder)} found but none loads, so resuming would restart "
            f"from step 0:{lines}\nNothing was moved. Load one yourself to see why (torch.load(path, "
            "weights_only=True)); to start from step 0 on purpose, move them out of the folder or point "
            "checkpoint.dir at another one")
    return None


def _move_aside(path: Path, why: str) -> None:
    aside = path.with_name(path.name + ".corrupt")
    try:
        os.replace(path, aside)
        moved = f"moved it to {aside.name}"
        with contextlib.suppress(OSError):  # its checksum goes with it, for the person who looks
            os.replace(sidecar(path), sidecar(aside))
    except FileNotFoundError:
        return  # another rank moved it already (and warned)
    except OSError as move_exc:
        moved = f"could not move it aside ({move_exc})"
    warnings.warn(f"checkpoint {path} does not load ({why}); {moved}; resumed from an older checkpoint",
                  RuntimeWarning, stacklevel=3)


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
