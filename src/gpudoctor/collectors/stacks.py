"""Ask the probed processes for their Python stacks, and name the stack files by rank.

Each probed process registered ``faulthandler`` on
:data:`~gpudoctor.collectors.instrument.stackdump.STACK_SIGNAL` with a file
``stacks-pid{PID}.txt`` in the run directory (:mod:`gpudoctor.collectors.instrument.stackdump`).
:func:`request` signals each of them that is still alive and below the child (never a stranger
that reused a pid), waits until the files stop growing, and adds py-spy's native
frames (``py-spy dump --native``) where py-spy is installed. :func:`settle` renames the files
with something in them to ``stacks-rank{N}.txt`` and removes the empty ones.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from gpudoctor.collectors.instrument.stackdump import STACK_SIGNAL

_PID_FILE = re.compile(r"stacks-pid(\d+)\.txt")
_RANK_LINE = re.compile(r"^# rank (\d+)$", re.M)
SETTLE_S = 3.0  # the longest wait for the dumps to land
PYSPY_TIMEOUT_S = 10.0


def _files(run_dir: Path) -> dict[int, Path]:
    out = {}
    for path in run_dir.glob("stacks-pid*.txt"):
        match = _PID_FILE.fullmatch(path.name)
        if match:
            out[int(match.group(1))] = path
    return out


def _descends(pid: int, root: int) -> bool:
    """Is ``pid`` ``root`` or below it? (torchrun starts its workers in sessions of their own,
    so the process group does not tell.) Linux reads ``/proc``; elsewhere the group decides."""
    if not Path("/proc/self/stat").exists():
        try:
            return os.getpgid(pid) == root
        except OSError:
            return False
    for _ in range(64):
        if pid == root:
            return True
        if pid <= 1:
            return False
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state: the parent
    return False


def request(run_dir: Path, root: int) -> list[int]:
    """Signal every live probed process at or below ``root``; return the pids asked."""
    asked = []
    files = _files(run_dir)
    for pid in sorted(files):
        try:
            if not _descends(pid, root):
                continue  # exited, and the pid may now belong to someone else
            os.kill(pid, STACK_SIGNAL)
        except (ProcessLookupError, PermissionError):
            continue
        asked.append(pid)
    if not asked:
        return asked
    sizes = {pid: -1 for pid in asked}
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = {pid: _size(files[pid]) for pid in asked}
        if now == sizes and all(_dumped(files[pid]) for pid in asked):
            break
        sizes = now
    pyspy = shutil.which("py-spy")
    if pyspy:
        for pid in asked:
            _native(pyspy, pid, run_dir / f"stacks-pid{pid}.native.txt")
    return asked


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def _dumped(path: Path) -> bool:
    try:
        return "most recent call first" in path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return True  # nothing to wait for


def _native(pyspy: str, pid: int, out: Path) -> None:
    try:
        result = subprocess.run([pyspy, "dump", "--native", "--pid", str(pid)], capture_output=True,
                                text=True, timeout=PYSPY_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return
    if result.stdout.strip():
        out.write_text(result.stdout, encoding="utf-8")


def settle(run_dir: Path, pid_ranks: dict[int, int]) -> list[Path]:
    """Name each stack file with a dump in it by its rank; remove the rest. Returns the kept files.

    The rank is the file's last ``# rank N`` line, else ``pid_ranks`` (from the rank configs),
    else 0 for a lone process; a process with no rank beside ranked ones (torchrun's launcher,
    the parent of ``torch.multiprocessing`` ranks) keeps its pid name.
    """
    found: list[tuple[int, Path, int | None]] = []
    for pid, path in sorted(_files(run_dir).items()):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if not [line for line in text.splitlines() if line.strip() and not line.startswith("#")]:
            path.unlink(missing_ok=True)
            continue
        ranks = _RANK_LINE.findall(text)
        found.append((pid, path, int(ranks[-1]) if ranks else pid_ranks.get(pid)))
    if len(found) == 1 and found[0][2] is None:
        found = [(found[0][0], found[0][1], 0)]  # a lone process that never named a rank: rank 0
    kept = []
    for pid, path, rank in found:
        target = run_dir / f"stacks-rank{rank}.txt" if rank is not None else path
        if target != path and target.exists():
            target = path  # two processes claimed one rank: keep the pid names
        if target != path:
            path.rename(target)
            native = run_dir / f"stacks-pid{pid}.native.txt"
            if native.exists():
                native.rename(run_dir / f"stacks-rank{rank}.native.txt")
        kept.append(target)
    return kept


__all__ = ["request", "settle"]
