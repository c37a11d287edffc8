"""What ``run_corpus.py`` and ``ab.py`` share: the work tree, variants, one ``gpudoctor run``,
and the figures of a run directory.

Work tree (``--work``, outside the repository): ``<work>/orig/<repo>/...`` is a copy of the
carried corpus plus the synthetic data; a *variant* ``<work>/<id>/<repo>/`` holds a fresh copy of
one script's folder (patched or not) with the data folders symlinked to ``orig``, so an
original (A) and a patched (B) run start from the same layout and write their own outputs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from manifest import Script

REPO_ROOT = Path(__file__).resolve().parents[2]
SRC = REPO_ROOT / "src"
DEFAULT_CORPUS = REPO_ROOT / ".corpus"
KEEP_SUFFIXES = (".json", ".jsonl")
STDOUT_TAIL_LINES = 80
TOP_KERNELS = 5


def prepare_work(corpus: Path, work: Path, *, scale: float, make: bool = True) -> dict:
    """Copy ``corpus`` to ``work/orig`` (fresh) and write the synthetic data there."""
    if not (corpus / "SOURCES.json").is_file():
        raise SystemExit(f"{corpus}: no SOURCES.json; run benchmarks/corpus/prepare.sh (and carry .corpus)")
    orig = work / "orig"
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(corpus, orig)
    sources = json.loads((corpus / "SOURCES.json").read_text())
    times = {}
    if make:
        from make_data import make_all

        times = make_all(orig, scale)
    return {"sources": sources, "data_seconds": times}


def make_variant(work: Path, script: Script, variant: str, patch=None) -> Path:
    """A fresh copy of ``script``'s folder under ``work/<variant>``; returns the folder it runs in.

    ``patch(repo_root)`` edits the copy (``fixes.apply``). Shared data paths are symlinks to
    ``orig`` (not copied, never patched).
    """
    src_repo = work / "orig" / script.repo
    dst_repo = work / variant / script.repo
    if dst_repo.exists():
        shutil.rmtree(dst_repo)
    dst_repo.mkdir(parents=True)
    shared = {(src_repo / p).resolve() for p in script.shared}

    def ignore(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if (Path(folder) / n).resolve() in shared]

    unit_src = src_repo / script.unit
    unit_dst = dst_repo / script.unit
    if script.unit == ".":
        shutil.rmtree(dst_repo)
    shutil.copytree(unit_src, unit_dst, ignore=ignore)
    for rel in script.shared:
        link = dst_repo / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            continue
        link.symlink_to((src_repo / rel).resolve(), target_is_directory=True)
    if patch is not None:
        patch(dst_repo)
    return dst_repo / script.cwd


def command(script: Script, run_dir: Path, steps: int, cpu: bool,
            first_step_timeout: float | None = None, stall_timeout: float | None = None) -> list[str]:
    args = script.cpu_args if cpu else script.args
    extra = ["--first-step-timeout", str(first_step_timeout)] if first_step_timeout else []
    extra += ["--stall-timeout", str(stall_timeout)] if stall_timeout else []
    return [sys.executable, "-m", "gpudoctor", "run", "--steps", str(steps), "--out", str(run_dir),
            "--json", "--fail-on", "never", *extra, "--", sys.executable, script.script, *args]


def environment(script: Script, cwd: Path) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(SRC)]
    if script.repo_on_path:
        repo_root = cwd
        for _ in Path(script.cwd).parts:
            repo_root = repo_root.parent
        paths.append(str(repo_root))
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("COLUMNS", "120")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def gpudoctor_run(script: Script, cwd: Path, run_dir: Path, *, steps: int, cpu: bool,
                  timeout_s: float, log: Path, first_step_timeout: float | None = None,
                  stall_timeout: float | None = None) -> dict:
    """``gpudoctor run --steps N --out RUN_DIR --json -- python SCRIPT ARGS`` from ``cwd``.

    Past ``timeout_s`` gpudoctor gets SIGINT (it stops the script and keeps the records), then
    SIGKILL 30 s later. Returns rc, wall time and the command; the console goes to ``log``.
    """
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    cmd = command(script, run_dir, steps, cpu, first_step_timeout, stall_timeout)
    t0 = time.perf_counter()
    timed_out = False
    with log.open("w") as out:
        out.write(f"cwd: {cwd}\n$ {' '.join(cmd)}\n\n")
        out.flush()
        proc = subprocess.Popen(cmd, cwd=cwd, env=environment(script, cwd), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        # same process group as this harness: `timeout` (run_all.sh) and Ctrl-C reach gpudoctor,
        # which then stops the script it started (in a group of its own) and keeps the records
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            proc.send_signal(signal.SIGINT)
            try:
                rc = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
    return {"rc": rc, "timed_out": timed_out, "wall_s": round(time.perf_counter() - t0, 2),
            "command": cmd, "cwd": str(cwd)}


def json_payload(log: Path) -> dict | None:
    """The ``--json`` object ``gpudoctor run`` printed (the last top-level JSON in the log)."""
    text = log.read_text(errors="replace")
    start = text.rfind("\n{")
    while start != -1:
        try:
            return json.loads(text[start + 1:])
        except json.JSONDecodeError:
            start = text.rfind("\n{", 0, start)
    return None


def pack(run_dir: Path, dest: Path) -> int:
    """Copy the small record files of ``run_dir`` (no traces) to ``dest``; return the bytes."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    total = 0
    if not run_dir.is_dir():
        return 0
    for child in sorted(run_dir.iterdir()):
        if not child.is_file() or child.name.startswith("trace"):
            continue
        if child.suffix in KEEP_SUFFIXES:
            shutil.copy2(child, dest / child.name)
        elif child.name == "stdout.log":
            lines = child.read_text(errors="replace").splitlines()[-STDOUT_TAIL_LINES:]
            (dest / child.name).write_text("\n".join(lines) + "\n")
        else:
            continue
        total += (dest / child.name).stat().st_size
    return total


def gpu_name() -> str:
    """The device the corpus ran on, for the results' header."""
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (CPU)"
    except Exception as exc:  # noqa: BLE001
        return f"unknown ({exc})"


def version_of(module: str) -> str | None:
    """A module's ``__version__``, or ``None`` where it is not installed."""
    try:
        return __import__(module).__version__
    except Exception:  # noqa: BLE001
        return None
