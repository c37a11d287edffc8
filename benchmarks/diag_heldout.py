"""`gpudoctor run` on planted held-out workloads: is the measured cause the top finding?

A set is ``benchmarks/heldout/<set>/``: ``cases/<case>/train.py`` (with the cause),
``train_fixed.py`` (only the cause removed) and ``cases.toml`` (category, fix keywords), written
by someone who had not read the diagnosis code. Two steps:

    # on the GPU machine: time both variants with an independent optimizer-step clock
    # (benchmarks/stepclock.py), then run gpudoctor on the variant with the cause
    python benchmarks/diag_heldout.py measure --set diag-1 --work /tmp/d --tar $OUT/diag.tgz
    # anywhere: judge the findings against the measured speed-ups
    python benchmarks/diag_heldout.py score --set diag-1 --work DIR [--clock DIR] --label before \
        --out benchmarks/results/diag_heldout/diag-1-before.json

``score --reanalyse`` diagnoses the stored records with today's analysis instead of reading the
findings the run wrote (what changes in the rules alone do; new probes need a new run).
``measure --skip-clock`` re-runs only gpudoctor (the speed-ups do not change with gpudoctor's
code; ``score --clock`` reads them from the earlier results). A case is *material* when its fix
is at least ``MATERIAL`` faster; the verdict of each case:

* ``right``: the first finding (diagnose's order, what a user reads first) is of the category's
  codes; for a ``clean`` control: no WARN or ERROR finding at all;
* ``wrong``: another finding comes first (or a WARN on a clean control);
* ``none``: no finding at all on a material case.

Each row also sets the measured gain (``1 - fixed/original`` step time) beside the expected gain of
the first finding of the case's category: the table the predictions are calibrated from.

The fix bar: every case whose fix gains at least 20% has a WARN/ERROR finding of its category
whose fix text contains one of the case's ``fix_keywords``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HELDOUT = ROOT / "benchmarks" / "heldout"
MATERIAL = 1.10  # a fix under 10% faster is within what one run of each can tell apart
FIX_BAR = 1.20  # the bar: a measured gain of 20% or more needs a WARN with that fix
CLOCK_STEPS = 80
CLOCK_WARM = 20

# category -> (finding codes that name it, why). Written before the first score; a code added
# later for a new finding joins the category whose cause it names.
CATEGORY_CODES: dict[str, tuple[tuple[str, ...], str]] = {
    "h2d_bytes": (("GD-RUN-PCIE-DEMAND", "GD-RUN-COPY-BOUND"),
                  "the bytes over the bus: the PCIe demand or copy-bound finding"),
    "d2h_copies": (("GD-RUN-COPY-BOUND", "GD-RUN-HOST-SYNC"),
                   "a device-to-host copy is both a copy and a sync"),
    "host_periodic_work": (("GD-RUN-PERIODIC-STALL", "GD-RUN-HOST-WORK"),
                           "slow steps from host work on the training thread"),
    "compile": (("GD-RUN-RECOMPILE", "GD-RUN-COMPILE-TIME"), "compilation cost"),
    "optimizer_overhead": (("GD-RUN-OPTIMIZER-STEP", "GD-RUN-LAUNCH-BOUND"),
                           "the optimizer step's host cost (many small kernels)"),
    "host_sync": (("GD-RUN-HOST-SYNC",), "host-device syncs"),
    "allocator": (("GD-RUN-FRAGMENTATION", "GD-RUN-EMPTY-CACHE"), "the caching allocator"),
    "input_pipeline": (("GD-RUN-DATALOADER", "GD-RUN-PERIODIC-STALL"), "waiting for the loader"),
    "launch_bound": (("GD-RUN-LAUNCH-BOUND",), "the host launches too slowly"),
    "python_gc": (("GD-RUN-PERIODIC-STALL", "GD-RUN-HOST-WORK"), "gc pauses on the training thread"),
    "dataparallel_single_gpu": (("GD-RUN-DATA-PARALLEL",), "DataParallel over one GPU"),
    "compute_precision": (("GD-RUN-FP32-COMPUTE",), "fp32 where bf16/TF32 would do"),
    "clean": ((), "no WARN or ERROR finding"),
}
KEEP = (".json", ".jsonl", ".txt", ".toml")


def load_cases(name: str) -> dict[str, dict]:
    with open(HELDOUT / name / "cases.toml", "rb") as f:
        return tomllib.load(f)


def _clock(script: Path, out: Path) -> dict:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "stepclock.py"), str(out), "--warm",
           str(CLOCK_WARM), str(script), "--steps", str(CLOCK_STEPS)]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    rec = json.loads(out.read_text()) if out.exists() else {}
    rec.update(rc=proc.returncode, wall_s=round(time.time() - t0, 1), stderr_tail=proc.stderr[-1500:])
    out.write_text(json.dumps(rec))
    return rec


def _gpudoctor(case_dir: Path, run_dir: Path) -> dict:
    cmd = [sys.executable, "-m", "gpudoctor", "run", "--out", str(run_dir), "--force",
           "--fail-on", "never", "--", sys.executable, "train.py", "--steps", "400"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])))
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=420, cwd=case_dir, env=env)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "gpudoctor-stdout.txt").write_text(proc.stdout[-20000:] + "\n--- stderr\n" + proc.stderr[-5000:])
    return {"rc": proc.returncode, "wall_s": round(time.time() - t0, 1)}


def _tar(work: Path, tar: Path) -> None:
    tmp = tar.with_suffix(".tmp")
    with tarfile.open(tmp, "w:gz") as t:
        for p in sorted(work.rglob("*")):
            if (p.is_file() and p.suffix in KEEP and p.stat().st_size < 4 << 20
                    and p.relative_to(work).parts[0] != "cases"):
                t.add(p, arcname=str(p.relative_to(work)))
    tmp.replace(tar)


def measure(ns: argparse.Namespace) -> None:
    cases = load_cases(ns.set)
    only = set(ns.only.split(",")) if ns.only else None
    work = Path(ns.work)
    (work / "clock").mkdir(parents=True, exist_ok=True)
    meta = {"set": ns.set, "host": platform.node(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": " ".join(sys.argv), "commit": _commit()}
    (work / "meta.json").write_text(json.dumps(meta))
    for name in cases:
        if only and name not in only:
            continue
        # a scratch copy: the scripts write checkpoints and logs beside themselves
        case_dir = work / "cases" / name
        shutil.rmtree(case_dir, ignore_errors=True)
        shutil.copytree(HELDOUT / ns.set / "cases" / name, case_dir)
        if not ns.skip_clock:
            for variant in ("train", "train_fixed"):
                rec = _clock(case_dir / f"{variant}.py", work / "clock" / f"{name}-{variant}.json")
                print(f"{name} {variant}: {rec.get('steady_step_ms')} ms/step rc={rec['rc']}", flush=True)
        res = _gpudoctor(case_dir, work / "runs" / name)
        print(f"{name} gpudoctor: rc={res['rc']} {res['wall_s']} s", flush=True)
        if ns.tar:
            _tar(work, Path(ns.tar))


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=ROOT).stdout.strip()
    except OSError:
        return ""


def _speedup(clock: Path, name: str) -> float | None:
    try:
        base = json.loads((clock / f"{name}-train.json").read_text())["steady_step_ms"]
        fixed = json.loads((clock / f"{name}-train_fixed.json").read_text())["steady_step_ms"]
    except (OSError, KeyError, ValueError):
        return None
    return base / fixed if base and fixed else None


def _reanalysed(run_dir: Path) -> list[dict]:
    """The findings today's analysis makes from the run's stored records (nothing is written)."""
    from gpudoctor.analysis.diagnose import diagnose
    from gpudoctor.records.base import to_dict
    from gpudoctor.records.rundir import load_run

    return [to_dict(f) for f in diagnose(load_run(run_dir))]


def _findings(run_dir: Path, reanalyse: bool = False) -> list[dict]:
    if reanalyse and (run_dir / "manifest.json").exists():
        return _reanalysed(run_dir)
    path = run_dir / "findings.json"
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    data = data.get("data", data) if isinstance(data, dict) else data  # the record envelope
    return data["findings"] if isinstance(data, dict) else data


def judge(case: dict, findings: list[dict], speedup: float | None) -> dict:
    codes = CATEGORY_CODES[case["category"]][0]
    loud = [f for f in findings if f.get("severity") in ("warn", "error")]
    first = findings[0]["code"] if findings else None
    if case["category"] == "clean":
        verdict = "right" if not loud else "wrong"
    elif first is None:
        verdict = "none"
    else:
        verdict = "right" if first in codes else "wrong"
    keywords = [k.lower() for k in case.get("fix_keywords", [])]
    fix_named = any(f["code"] in codes and any(k in (f.get("fix") or "").lower() for k in keywords)
                    for f in loud)
    named = next((f for f in findings if f["code"] in codes and f.get("expected_gain") is not None), None)
    return {"category": case["category"], "speedup": None if speedup is None else round(speedup, 3),
            "measured_gain": None if not speedup else round(1.0 - 1.0 / speedup, 3),
            "predicted_gain": None if named is None else named["expected_gain"],
            "material": case["category"] == "clean" or (speedup is not None and speedup >= MATERIAL),
            "verdict": verdict, "first": first, "first_title": findings[0]["title"] if findings else "",
            "loud": [f["code"] for f in loud], "fix_named": fix_named}


def score(ns: argparse.Namespace) -> None:
    cases = load_cases(ns.set)
    work = Path(ns.work)
    clock = Path(ns.clock) / "clock" if ns.clock else work / "clock"
    rows = {name: judge(case, _findings(work / "runs" / name, ns.reanalyse), _speedup(clock, name))
            for name, case in cases.items()}
    material = [r for r in rows.values() if r["material"]]
    right = sum(r["verdict"] == "right" for r in material)
    big = [r for r in rows.values() if r["speedup"] and r["speedup"] >= FIX_BAR]
    meta = json.loads((work / "meta.json").read_text()) if (work / "meta.json").exists() else {}
    summary = {"label": ns.label, "set": ns.set, "material_cases": len(material), "top_right": right,
               "fix_bar_cases": len(big), "fix_named": sum(r["fix_named"] for r in big),
               "measured": meta, "scored_with": " ".join(sys.argv)}
    print(f"{'case':20} {'category':20} {'x':>6} {'gain':>5} {'pred':>5} {'verdict':7} first finding")
    for name, r in rows.items():
        sp = f"{r['speedup']:.2f}" if r["speedup"] else "-"
        gain = f"{r['measured_gain']:.2f}" if r["measured_gain"] is not None else "-"
        pred = f"{r['predicted_gain']:.2f}" if r["predicted_gain"] is not None else "-"
        mark = "" if r["material"] else " (not material)"
        print(f"{name[:20]:20} {r['category'][:20]:20} {sp:>6} {gain:>5} {pred:>5} {r['verdict']:7} {r['first']}{mark}")
    print(f"top finding right: {right} of {len(material)} material cases; fix named in "
          f"{summary['fix_named']} of {len(big)} cases gaining >= {FIX_BAR - 1:.0%}")
    if ns.out:
        Path(ns.out).parent.mkdir(parents=True, exist_ok=True)
        Path(ns.out).write_text(json.dumps({"summary": summary, "cases": rows}, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--set", required=True)
    m.add_argument("--work", required=True)
    m.add_argument("--tar")
    m.add_argument("--only")
    m.add_argument("--skip-clock", action="store_true")
    s = sub.add_parser("score")
    s.add_argument("--set", required=True)
    s.add_argument("--work", required=True)
    s.add_argument("--clock")
    s.add_argument("--label", default="")
    s.add_argument("--out")
    s.add_argument("--reanalyse", action="store_true",
                   help="diagnose the stored records with today's code instead of reading findings.json")
    ns = parser.parse_args()
    (measure if ns.cmd == "measure" else score)(ns)


if __name__ == "__main__":
    main()
