"""Corpus ground truth (device call 2): the prescribed fix, applied by hand to a copy, measured.

For each script whose verdict (``corpus-verdicts.json`` of call 1) is a WARN/ERROR finding,
the fix kind that applies its prescription (``fixes.kind_for``; ``--fix name=kind`` overrides)
is patched into a copy (``fixes.apply``), and the original (A) and the patched copy (B) run
interleaved A B A B ... (``--rounds``, at least 2) under the same ``gpudoctor run --steps 60``.
Steady throughput comes from ``run_stats(load_run(dir))`` (samples/s; steps/s when the batch
size is unknown). Per round the gain is B/A - 1; the row gives the median and the range, A's
own run-to-run range (noise), the predicted saving (the finding's expected gain: share of step
time saved) against the measured one (1 - A's per-sample time / B's), and what gpudoctor says
of the patched copy. Confirmed = median gain >= 10%, every round faster, and the median gain
larger than A's own run-to-run range (else "within A's run-to-run range: run more rounds").

A script with no WARN/ERROR finding needs no fix (the bar: no WARN); it is listed, not run.
Runs stop being started when ``--budget-s`` would be passed; what was left is listed in the
table (``not_run``) and can be run in another call with ``--only``.

Writes OUT/corpus-ab.json, OUT/corpus-ab.md, OUT/runs-ab/<name>/<A|B><round>/ (records, no traces).

    PYTHONPATH=src python3 benchmarks/corpus/ab.py --verdicts benchmarks/results/corpus/corpus-verdicts.json --out OUT
    PYTHONPATH=src python3 benchmarks/corpus/ab.py --all-fixes --cpu --steps 8 --rounds 1 --out /tmp/ab  # CPU check
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fixes  # noqa: E402
import harness  # noqa: E402
from figures import read_run  # noqa: E402
from manifest import BY_NAME, Script, select  # noqa: E402
from tables import ab_markdown  # noqa: E402

BAR = 0.10
COMPILE_START_S = 240.0  # extra time before the first step and in the timeout for a compiled copy


def plan(args) -> list[dict]:
    """(script, verdict, fix kind) rows, from call 1's verdicts or every implemented fix."""
    overrides = dict(item.split("=", 1) for item in args.fix.split(",") if item)
    scripts = select(args.only)
    rows = []
    if args.all_fixes:
        for s in scripts:
            kinds = [overrides[s.name]] if s.name in overrides else list(s.fixes)
            kinds = [k for k in kinds if k not in args.skip_kinds.split(",")]
            rows += [{"name": s.name, "verdict_code": None, "predicted_saving": None, "fix": k} for k in kinds]
        return rows
    doc = json.loads(args.verdicts.read_text())
    by_name = {r["name"]: r for r in doc["rows"]}
    for s in scripts:
        r = by_name.get(s.name)
        if r is None:
            continue
        v = r.get("verdict") or {}
        kind = overrides.get(s.name) or fixes.kind_for(v.get("code"))
        row = {"name": s.name, "verdict_code": v.get("code"), "verdict_title": v.get("title"),
               "predicted_saving": v.get("expected_gain"), "fix": kind,
               "verdict_status": r.get("status")}
        if not v.get("code") and s.name not in overrides:
            row.update(fix=None, outcome="no WARN: no fix needed")
        elif kind is None:
            row["outcome"] = f"no hand fix for {v.get('code')}"
        elif kind not in s.fixes:
            row["outcome"] = f"fix {kind!r} not written for this script"
        rows.append(row)
    return rows


def throughput(run_dir: Path) -> tuple[float | None, str | None, dict]:
    figures = read_run(run_dir)
    return figures.get("throughput"), figures.get("unit"), figures


def judge(a: list[float], b: list[float]) -> dict:
    gains = [bb / aa - 1.0 for aa, bb in zip(a, b) if aa and bb]
    if not gains:
        return {"gains": [], "gain_median": None}
    med = statistics.median(gains)
    a_med = statistics.median(a)
    return {"a": a, "b": b, "gains": gains, "gain_median": med,
            "saving_median": 1.0 - 1.0 / (1.0 + med),
            "noise_a": (max(a) - min(a)) / a_med if len(a) > 1 and a_med else None,
            "every_round_faster": all(g > 0 for g in gains)}


def run_pair(row: dict, script: Script, work: Path, out: Path, args) -> None:
    """A B A B ... for one (script, fix) row; fills ``row``."""
    cwd_a = harness.make_variant(work, script, f"{script.name}__orig")
    changed: list[str] = []

    def patch(repo_root: Path) -> None:
        changed.extend(fixes.apply(script.source, row["fix"], repo_root, workers=args.workers))

    try:
        cwd_b = harness.make_variant(work, script, f"{script.name}__{row['fix']}", patch)
    except fixes.PatchError as exc:
        row["outcome"] = f"patch failed: {exc}"
        return
    row["files_patched"] = changed
    a_vals, b_vals, runs, after = [], [], [], None
    arms = (("B", cwd_b),) if args.b_only else (("A", cwd_a), ("B", cwd_b))
    for rnd in range(args.rounds):
        for arm, cwd in arms:
            tag = f"{arm}{rnd}"
            run_dir = work / "runs-ab" / script.name / row["fix"] / tag
            log = out / "logs-ab" / f"{script.name}.{row['fix']}.{tag}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            # torch.compile spends its first step compiling: more time before the first step
            # (the steady steps, after warm-up, are what is compared)
            slow_start = COMPILE_START_S if arm == "B" and row["fix"] == "compile" else 0.0
            res = harness.gpudoctor_run(script, cwd, run_dir, steps=args.steps, cpu=args.cpu,
                                        timeout_s=script.timeout_s * args.timeout_scale + slow_start,
                                        log=log, first_step_timeout=120.0 + slow_start if slow_start else None)
            value, unit, figures = throughput(run_dir)
            if arm == "B" and row["fix"] == "batch" and unit == "steps/s" and value:
                # no batch size recorded (no DataLoader): a step of B carries BATCH_FACTOR x the samples
                value, unit = value * fixes.BATCH_FACTOR, f"steps/s of the original batch (B x {fixes.BATCH_FACTOR})"
            harness.pack(run_dir, out / "runs-ab" / script.name / row["fix"] / tag)
            runs.append({"arm": arm, "round": rnd, "rc": res["rc"], "wall_s": res["wall_s"],
                         "status": figures.get("status"), "throughput": value, "unit": unit,
                         "step_ms": figures.get("step_ms"), "mean_step_ms": figures.get("mean_step_ms"),
                         "verdict": figures.get("verdict")})
            (a_vals if arm == "A" else b_vals).append(value)
            if arm == "B":
                after = figures.get("verdict")
            print(f"    {script.name} {row['fix']} {tag}: {res['wall_s']:.1f} s rc={res['rc']} "
                  f"{figures.get('status')} {value and round(value, 1)} {unit or ''}", flush=True)
    row["runs"] = runs
    row["after_verdict"] = after
    if args.b_only:
        ok = all(r["status"] in ("stopped", "completed") and r["throughput"] for r in runs)
        row["outcome"] = "patched copy ran" if ok else "patched copy FAILED: see logs-ab/"
        return
    units = {r["unit"].split(" of the original")[0] for r in runs if r["unit"]}
    row["unit"] = units.pop() if len(units) == 1 else None
    if None in a_vals or None in b_vals or row["unit"] is None:
        row["measured"] = {"gains": [], "gain_median": None}
        row["outcome"] = "no measurement (a run recorded no steady steps, or units differ)"
        return
    m = judge(a_vals, b_vals)
    row["measured"] = m
    if row.get("verdict_code") is None:
        row["outcome"] = "ran (CPU check)" if args.cpu else "measured (no verdict given)"
    elif m["gain_median"] >= BAR and m["every_round_faster"]:
        noisy = m["noise_a"] is not None and m["gain_median"] <= m["noise_a"]
        row["outcome"] = ("faster, but within A's run-to-run range: run more rounds" if noisy
                          else "confirmed")
    else:
        row["outcome"] = "not confirmed"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--verdicts", type=Path, default=None, help="corpus-verdicts.json of call 1")
    parser.add_argument("--all-fixes", action="store_true", help="every implemented fix (CPU check of the patches)")
    parser.add_argument("--b-only", action="store_true",
                        help="run only the patched copies (CPU check that every patch runs)")
    parser.add_argument("--skip-kinds", default="", help="with --all-fixes: kinds left out, e.g. batch")
    parser.add_argument("--fix", default="", help="name=kind[,name=kind]: override the fix chosen from the verdict")
    parser.add_argument("--corpus", type=Path, default=harness.DEFAULT_CORPUS)
    parser.add_argument("--work", type=Path, default=Path("/tmp/gpudoctor-corpus-ab"))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=8, help="num_workers of the loader fix")
    parser.add_argument("--only", default="")
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--scale", type=float, default=None)
    parser.add_argument("--timeout-scale", type=float, default=1.0)
    parser.add_argument("--budget-s", type=float, default=480.0,
                        help="start no pair that the time spent so far plus its estimate would pass")
    args = parser.parse_args()
    if not args.all_fixes and args.verdicts is None:
        parser.error("give --verdicts (call 1's corpus-verdicts.json) or --all-fixes")
    t0 = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    scale = args.scale if args.scale is not None else (0.1 if args.cpu else 1.0)
    prep = harness.prepare_work(args.corpus, args.work, scale=scale)
    rows = plan(args)
    walls = {}
    if args.verdicts is not None and args.verdicts.is_file():
        walls = {r["name"]: r.get("wall_s") or 0.0 for r in json.loads(args.verdicts.read_text())["rows"]}
    not_run = []
    for row in rows:
        script = BY_NAME[row["name"]]
        if row.get("outcome") or row.get("fix") is None:
            continue
        if args.cpu and not script.cpu_ok:
            row["outcome"] = "not run on CPU (hard-codes a GPU)"
            continue
        estimate = 2 * args.rounds * walls.get(script.name, 0.0)
        spent = time.perf_counter() - t0
        if spent + estimate > args.budget_s:
            row["outcome"] = f"not run: budget ({spent:.0f} s spent, ~{estimate:.0f} s needed)"
            not_run.append(f"{script.name}={row['fix']}")
            continue
        print(f"--- {script.name}: verdict {row.get('verdict_code')} -> fix {row['fix']}", flush=True)
        run_pair(row, script, args.work, args.out, args)
        _write(args, prep, rows, not_run, t0)
    doc = _write(args, prep, rows, not_run, t0)
    print(ab_markdown(doc))
    return 0


def _write(args, prep: dict, rows: list[dict], not_run: list[str], t0: float) -> dict:
    doc = {"what": "prescribed fix applied by hand to a copy; original vs patched, interleaved (benchmarks/corpus/ab.py)",
           "steps": args.steps, "rounds": args.rounds, "bar": BAR, "cpu_check": args.cpu,
           "gpu": harness.gpu_name(), "host": platform.node(), "torch": harness.version_of("torch"),
           "torchvision": harness.version_of("torchvision"), "loader_workers": args.workers,
           "sources": prep["sources"], "verdicts": str(args.verdicts) if args.verdicts else None,
           "total_wall_s": round(time.perf_counter() - t0, 1), "not_run": not_run, "rows": rows}
    (args.out / "corpus-ab.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    (args.out / "corpus-ab.md").write_text(ab_markdown(doc))
    return doc


if __name__ == "__main__":
    sys.exit(main())
