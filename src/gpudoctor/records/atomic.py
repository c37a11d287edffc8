"""The one atomic file writer: a reader sees the old file or the new one, never half of one.

The bytes go to a temporary file of a name of its own in the same folder
(``NAME.<pid>-<8 hex>.tmp``, created exclusively, so two writers never share one), which is
flushed and fsynced, given the mode asked for, renamed over ``path`` (atomic on POSIX), and the
folder is fsynced so the rename survives a crash. If anything fails the temporary file is removed
and ``path`` is untouched. Standard library only; used by records, the report, ``lint --fix``
and the engine's checkpoints.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

TMP_SUFFIX = re.compile(r"\.\d+-[0-9a-f]{8}\.tmp")
"""What :func:`atomic_file` appends to a name for its temporary file (``re.fullmatch`` a tail)."""


def temp_name(path: Path) -> Path:
    """A fresh temporary name beside ``path``: ``NAME.<pid>-<8 hex>.tmp``."""
    return path.with_name(f"{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - file systems that refuse fsync on a folder
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_file(path: Path, *, mode: int | None = None) -> Iterator[BinaryIO]:
    """Open a binary handle whose content replaces ``path`` when the ``with`` block ends cleanly.

    ``mode``: permission bits for the new file (default: what the process's umask gives).
    An exception inside the block removes the temporary file, leaves ``path`` as it was and
    propagates.
    """
    path = Path(path)
    tmp = temp_name(path)
    handle = open(tmp, "xb")  # noqa: SIM115 - closed below; "x": created here, never shared
    try:
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def write_bytes_atomic(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` atomically (see the module docstring)."""
    with atomic_file(path, mode=mode) as handle:
        handle.write(data)


def write_text_atomic(path: Path, text: str, *, encoding: str = "utf-8") -> None:
    """Replace ``path`` with ``text`` atomically (see the module docstring)."""
    write_bytes_atomic(path, text.encode(encoding))


__all__ = ["TMP_SUFFIX", "atomic_file", "fsync_dir", "temp_name", "write_bytes_atomic", "write_text_atomic"]
