"""Verdict benchmark: does `gpudoctor run` name each workload's planted problem first, fast?

For every workload in ``gpudoctor.workloads.WORKLOADS`` that this machine can show (enough GPUs),
run ``python3 -m gpudoctor run --steps 60 --out OUT/runs/<name> -- <workload>`` and time its wall
clock; then re-load each run directory, diagnose it, and check the bars of issue 4:

* the planted problem is the top finding (the clean baseline: no WARN/ERROR finding at all);
* each verdict takes at most 60 s of wall time.

Prints a table and writes ``OUT/run_verdicts.json``. ``--summarize-only`` skips the runs and only
judges run directories already under ``OUT/runs`` again (a re-analysis: the plan and the wall
times are those of the machine and the runs that recorded them, read from the previous
``OUT/run_verdicts.json``; ``--label`` says so at the top of the table and in the JSON). ``--pack DIR`` copies each run directory
without traces (only the small record files, stdout tail) for use as a test fixture.

    PYTHONPATH=src python3 benchmarks/run_verdicts.py --out /tmp/verdicts [--size small] [--only a,b]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from gpudoctor.analysis.diagnose import diagnose
from gpudoctor.records.base import to_dict
from gpudoctor.records.finding import Severity
from gpudoctor.records.rundir import load_run
from gpudoctor.workloads import WORKLOADS, Workload

VERDICT_BAR_S = 60.0
FIXTURE_FILES = ("manifest.json", "gpu.jsonl", "host.jsonl", "findings.json", "env.json")
FIXTURE_PREFIXES = ("config-rank", "steps-rank", "window-rank")
STDOUT_TAIL_LINES = 60


def gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - no torch here: count as no GPU
        return 0


def plan(gpus: int, only: set[str] | None) -> list[tuple[Workload, int]]:
    """Workloads this machine can show, with their process count.

    With one GPU: ``ddp_no_set_epoch`` runs as one rank (NCCL refuses two ranks on one GPU; the
    missing set_epoch shows with one rank just the same); ``ddp_all_on_gpu0`` keeps two ranks on
    gloo (sharing GPU 0 is its point); the straggler needs two GPUs.
    """
    out = []
    for w in WORKLOADS.values():
        if only and w.name not in only:
            continue
        if w.min_gpus > gpus:
            continue
        nproc = w.nproc
        if w.name == "ddp_no_set_epoch" and gpus == 1:
            nproc = 1
        out.append((w, nproc))
    return out


def run_one(w: Workload, nproc: int, run_dir: Path, size: str, steps: int, timeout_s: float) -> dict:
    if run_dir.exists():
        shutil.rmtree(run_dir)
    cmd = [sys.executable, "-m", "gpudoctor", "run", "--steps", str(steps), "--fail-on", "never", "--out", str(run_dir),
           "--", *w.argv(size=size, steps=steps + 20, python=sys.executable, nproc=nproc)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        rc, tail = proc.returncode, (proc.stdout + proc.stderr)[-4000:]
    except subprocess.TimeoutExpired as exc:
        rc, tail = 124, f"timed out after {timeout_s:.0f} s\n{exc.stdout or ''}"[-4000:]
    wall = time.perf_counter() - t0
    (run_dir.parent / f"{w.name}.console.txt").write_text(" ".join(cmd) + "\n\n" + tail)
    return {"name": w.name, "nproc": nproc, "rc": rc, "wall_s": round(wall, 2), "command": cmd}


def judge(w: Workload, run_dir: Path) -> dict:
    """Diagnose ``run_dir`` again (pure) and compare with the planted problem."""
    if not (run_dir / "manifest.json").is_file():
        return {"top": None, "ok": False, "why": "no run directory", "findings": []}
    run = load_run(run_dir)
    findings = diagnose(run)
    codes = [f"{f.severity.value}:{f.code}" for f in findings]
    serious = [f for f in findings if f.severity is not Severity.INFO]
    top = findings[0].code if findings else None
    if w.planted is None:
        ok = not serious
        why = "no warning" if ok else f"false alarm: {serious[0].code}"
    else:
        ok = top == w.planted and findings[0].severity is not Severity.INFO
        if ok:
            why = "planted problem first"
        elif top == w.planted:
            why = f"{w.planted} only as a note (info): {findings[0].title}"
        else:
            why = f"expected {w.planted}, got {top}"
    steps = {r: len(s) for r, s in run.steps.items()}
    return {"top": top, "ok": ok, "why": why, "findings": codes, "steps": steps,
            "status": run.manifest.status,
            "top_gain": findings[0].expected_gain if findings else None,
            "top_title": findings[0].title if findings else ""}


def pack(run_dir: Path, dest: Path) -> int:
    """Copy the small record files of ``run_dir`` to ``dest``; return the bytes written."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    total = 0
    for child in sorted(run_dir.iterdir()):
        if not child.is_file():
            continue
        if child.name in FIXTURE_FILES or child.name.startswith(FIXTURE_PREFIXES):
            if child.suffix in (".json", ".jsonl"):
                shutil.copy2(child, dest / child.name)
                total += child.stat().st_size
        elif child.name == "stdout.log":
            lines = child.read_text(errors="replace").splitlines()[-STDOUT_TAIL_LINES:]
            (dest / child.name).write_text("\n".join(lines) + "\n")
            total += (dest / child.name).stat().st_size
    return total


def table(rows: list[dict], label: str = "") -> str:
    head = f"{'workload':18} {'ranks':>5} {'wall s':>7} {'<=60s':>5} {'ok':>3}  top finding / why"
    lines = ([label] if label else []) + [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['name']:18} {r['nproc']:>5} {r['wall_s']:>7.1f} "
                     f"{'yes' if r['wall_s'] <= VERDICT_BAR_S else 'NO':>5} "
                     f"{'yes' if r['ok'] else 'NO':>3}  {r['top'] or '-'} ({r['why']})")
    passed = sum(1 for r in rows if r["ok"] and r["wall_s"] <= VERDICT_BAR_S)
    lines.append(f"{passed}/{len(rows)} workloads meet both bars")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--size", default="small", choices=("tiny", "small", "medium"))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--only", default="", help="comma-separated workload names")
    parser.add_argument("--timeout", type=float, default=120.0, help="per workload, seconds")
    parser.add_argument("--summarize-only", action="store_true")
    parser.add_argument("--pack", type=Path, default=None, help="write fixtures here")
    parser.add_argument("--label", default="", help="a line above the table and in the JSON")
    args = parser.parse_args()
    runs = args.out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    only = {s for s in args.only.split(",") if s} or None
    gpus = gpu_count()
    hostname = os.uname().nodename
    previous = {}
    result_path = args.out / "run_verdicts.json"
    if args.summarize_only and result_path.is_file():
        doc = json.loads(result_path.read_text())
        previous = {r["name"]: r for r in doc["rows"]}
        gpus = doc.get("gpus", gpus)  # plan as the recording machine did, not as this one
        hostname = doc.get("hostname", hostname)
    rows = []
    for w, nproc in plan(gpus, only):
        if args.summarize_only:
            row = previous.get(w.name, {"name": w.name, "nproc": nproc, "rc": None, "wall_s": 0.0})
            if not (runs / w.name).is_dir():
                continue
            if "top" in row and "first_analysis" not in row:
                # keep what the run's own analysis said next to the re-analysis
                row["first_analysis"] = {k: row.get(k) for k in
                                         ("top", "ok", "why", "findings", "top_gain", "top_title")}
        else:
            print(f"--- {w.name} (ranks {nproc})", flush=True)
            row = run_one(w, nproc, runs / w.name, args.size, args.steps, args.timeout)
        row.update(judge(w, runs / w.name))
        if args.pack is not None and (runs / w.name).is_dir():
            row["fixture_bytes"] = pack(runs / w.name, args.pack / w.name)
        rows.append(row)
        print(f"    {row['wall_s']:.1f} s  rc={row['rc']}  top={row['top']}  {row['why']}", flush=True)
    text = table(rows, args.label)
    print(text)
    payload = {"gpus": gpus, "size": args.size, "steps": args.steps, "bar_s": VERDICT_BAR_S,
               "hostname": hostname, "rows": rows}
    if args.label:
        payload["label"] = args.label
    result_path.write_text(json.dumps(to_dict(payload), indent=2) + "\n")
    (args.out / "run_verdicts.txt").write_text(text + "\n")
    return 0 if all(r["ok"] and r["wall_s"] <= VERDICT_BAR_S for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
