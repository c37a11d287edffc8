"""``--out``: take a new directory, or replace an earlier gpudoctor run with ``--force``; touch
nothing else.

A directory gpudoctor may replace holds only what gpudoctor writes: a run directory (its
``manifest.json`` and the files listed in :mod:`gpudoctor.records.rundir`), or the ``baseline``
and ``try`` run directories of ``--try`` and ``doctor``. A file of anyone else's inside — a
``stdout.log`` beside a script, a checkpoint — makes it refused, ``--force`` or not, and nothing
is removed.
"""

from __future__ import annotations

import re
from pathlib import Path

from gpudoctor.errors import GpuDoctorUserError
from gpudoctor.records.rundir import MANIFEST

_OURS = re.compile(
    r"(manifest\.json|gpu\.jsonl|host\.jsonl|env\.json|findings\.json|stdout\.log|report\.html"
    r"|oom(-rank\d+)?\.json|oom-snapshot(-rank\d+)?\.pickle"
    r"|(config|window|trace)-rank\d+\.json|(steps|memory)-rank\d+\.jsonl"
    r"|stacks-(rank|pid)\d+(\.native)?\.txt|children-pid\d+\.txt|compile-pid\d+\.jsonl)(\.tmp|\.\d+-[0-9a-f]{8}\.tmp)?"  # records.atomic's temp names
)
_SUBRUNS = ("baseline", "try")


def _foreign(folder: Path, *, top: bool) -> list[Path]:
    """Entries of ``folder`` gpudoctor did not write (a sub-run's too, at the top level)."""
    out = []
    for entry in sorted(folder.iterdir()):
        if entry.is_dir() and not entry.is_symlink() and top and entry.name in _SUBRUNS:
            out.extend(_foreign(entry, top=False))
        elif not (entry.is_file() and not entry.is_symlink() and _OURS.fullmatch(entry.name)):
            out.append(entry)
    return out


def _is_run(folder: Path) -> bool:
    return (folder / MANIFEST).is_file() or any((folder / sub / MANIFEST).is_file() for sub in _SUBRUNS)


def claim(path: Path, *, force: bool = False) -> None:
    """Make ``path`` ready for a new run, or raise :class:`GpuDoctorUserError` having touched nothing.

    A path that does not exist, or an empty directory: fine. An earlier gpudoctor run: removed
    with ``force`` (its files only), refused without. Anything else: refused.
    """
    path = Path(path)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise GpuDoctorUserError(f"--out {path}: that is a file, not a directory; give a new directory")
    if not path.exists() or not any(path.iterdir()):
        return
    foreign = _foreign(path, top=True)
    if not _is_run(path) or foreign:
        entries = foreign or sorted(path.iterdir())
        shown = ", ".join(str(p.relative_to(path)) for p in entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise GpuDoctorUserError(
            f"--out {path}: the directory exists and holds files that are not a gpudoctor run's ({shown}); "
            "give a new directory (nothing was touched)"
        )
    if not force:
        raise GpuDoctorUserError(
            f"--out {path}: it holds an earlier gpudoctor run; pass --force to replace it, or give a new directory"
        )
    for sub in _SUBRUNS:
        if (path / sub).is_dir():
            _clear(path / sub)
            (path / sub).rmdir()
    _clear(path)


def _clear(folder: Path) -> None:
    for entry in folder.iterdir():
        if entry.is_file() and _OURS.fullmatch(entry.name):
            entry.unlink()
