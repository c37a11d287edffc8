"""Issue 24's bars on one GPU: ``gpudoctor fix --write`` on the README's data-loader-bound example
and on the corpus scripts, each patched copy then measured against its original.

README example (``--readme``): ``src/gpudoctor/workloads/basic_user.py`` (the script ``doctor``
embeds, the README's doctor run) is copied to ``WORK/readme/``, ``gpudoctor fix --write --json``
patches it (its own interleaved A/B per change), then original (``basic_user.py.orig``) and fixed
copy run interleaved A B A B under ``gpudoctor run --steps N`` (``--rounds``). Bar: the median
throughput ratio fixed/original >= 3.

Planted (``--planted``): each one-GPU planted workload is patched the same way, and ``run --try``
with the knobs of its top testable finding (``knob_map.first_testable``) gives the gain to meet.

Corpus: for each script of ``corpus-verdicts.json`` whose verdict is WARN/ERROR, a fresh copy
(``harness.make_variant``) gets ``gpudoctor fix --write --json`` from the folder it runs in; the
row keeps every change with its measured verdict, the advice, the combined gain and noise, and
the hand fix's gain from the A/B tables (``corpus-ab-*.json``). Bar: a patch that runs, faster by
at least that gain minus its noise; a script without a WARN gets no patch (listed, not run).

Writes OUT/fix-bars.json and OUT/fix-bars.md; each fix's JSON and log under OUT/logs-fix/.

    PYTHONPATH=src python3 benchmarks/corpus/fix_corpus.py --readme --out OUT            # README bar only
    PYTHONPATH=src python3 benchmarks/corpus/fix_corpus.py --planted --out OUT            # planted workloads
    PYTHONPATH=src python3 benchmarks/corpus/fix_corpus.py --corpus .corpus --out OUT     # the corpus
    PYTHONPATH=src python3 benchmarks/corpus/fix_corpus.py --readme --workload-args="--size tiny" --steps 12 \
        --rounds 1 --out /tmp/fixbars                                               # CPU check
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
from figures import read_run  # noqa: E402
from manifest import select  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
README_BAR = 3.0


def gpudoctor_fix(cwd: Path, script: str, args: list[str], out: Path, log: Path, *, steps: int, repeats: int,
                  env: dict, timeout_s: float) -> dict:
    """``gpudoctor fix --write --json`` in ``cwd``; its JSON (or the failure) and wall time."""
    cmd = [sys.executable, "-m", "gpudoctor", "fix", "--write", "--json", "--steps", str(steps),
           "--repeats", str(repeats), "--out", str(out), script, "--", *args]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        log.write_text(f"$ {' '.join(cmd)}\nTIMEOUT after {timeout_s} s\n{exc.stderr or ''}")
        return {"rc": None, "timed_out": True, "wall_s": round(time.perf_counter() - t0, 1)}
    log.write_text(f"cwd: {cwd}\n$ {' '.join(cmd)}\n\n--- stderr\n{proc.stderr}\n--- stdout\n{proc.stdout}")
    try:
        payload = json.loads(proc.stdout)
    except json.JSONDecodeError:
        payload = None
    return {"rc": proc.returncode, "timed_out": False, "wall_s": round(time.perf_counter() - t0, 1),
            "fix": payload}


def run_once(cwd: Path, script: str, args: list[str], run_dir: Path, steps: int, env: dict, log: Path) -> dict:
    if run_dir.exists():
        shutil.rmtree(run_dir)
    cmd = [sys.executable, "-m", "gpudoctor", "run", "--steps", str(steps), "--out", str(run_dir), "--json",
           "--fail-on", "never", "--no-profile", "--", sys.executable, script, *args]
    with log.open("w") as out:
        rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=600).returncode
    figures = read_run(run_dir)
    return {"rc": rc, "throughput": figures.get("throughput"), "unit": figures.get("unit"),
            "step_ms": figures.get("step_ms"), "status": figures.get("status")}


def readme(args, out: Path) -> dict:
    work = args.work / "readme"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    shutil.copy(REPO / "src" / "gpudoctor" / "workloads" / "basic_user.py", work / "basic_user.py")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(harness.SRC), os.environ.get("PYTHONPATH", ""))
                                                       if p), "COLUMNS": "120", "PYTHONUNBUFFERED": "1"}
    extra = args.workload_args.split()
    res = gpudoctor_fix(work, "basic_user.py", extra, work / "fix-run", out / "logs-fix" / "readme.log",
                        steps=args.steps, repeats=args.repeats, env=env, timeout_s=args.timeout_s)
    row = {"name": "readme_basic_user", **res}
    if not (work / "basic_user.py.orig").is_file():
        row["outcome"] = "no patch written"
        return row
    a, b = [], []
    # the fixed arm runs the command line fix says to use (a flag the patch set a new default for,
    # given in ``extra``, gets the new value there): the same command fix measured
    fixed_args = ((res.get("fix") or {}).get("command") or [None, None, *extra])[2:]
    for rnd in range(args.rounds):
        for arm, script in (("A", "basic_user.py.orig"), ("B", "basic_user.py")):
            r = run_once(work, script, extra if arm == "A" else list(fixed_args), work / "ab" / f"{arm}{rnd}",
                         args.steps, env,
                         out / "logs-fix" / f"readme.{arm}{rnd}.log")
            (a if arm == "A" else b).append(r["throughput"])
            print(f"  readme {arm}{rnd}: {r['status']} {r['throughput']} {r['unit']}", flush=True)
    ok = all(a) and all(b)
    ratio = statistics.median(b) / statistics.median(a) if ok else None
    row.update(a=a, b=b, ratio=ratio, noise_a=(max(a) - min(a)) / statistics.median(a) if ok and len(a) > 1 else None,
               outcome=("met" if ratio and ratio >= README_BAR else "not met") + f" (bar {README_BAR:g}x)")
    return row


PLANTED = ("basic_user", "fp32_convnet", "tiny_batch", "item_every_step", "pageable_copies", "clean")


def try_gain(work: Path, script: str, run_dir: Path, env: dict, log: Path, steps: int, extra: list[str],
             repeats: int = 3) -> dict:
    """``run --try`` with the knobs of the top testable finding of ``run_dir`` (fix's baseline)."""
    from gpudoctor.analysis.diagnose import diagnose
    from gpudoctor.analysis.knob_map import first_testable
    from gpudoctor.records.rundir import load_run

    run = load_run(run_dir)
    config = run.configs[min(run.configs)] if run.configs else None
    findings = list(diagnose(run))
    top = next((f.code for f in findings if f.severity.value != "info"), None)  # the baseline's verdict
    testable = first_testable(findings, config)
    if testable is None:
        return {"knobs": None, "top": top}
    finding, knobs = testable
    cmd = [sys.executable, "-m", "gpudoctor", "run", "--try", knobs, "--steps", str(steps), "--repeats", str(repeats),
           "--json", "--fail-on", "never", "--out", str(work / "try"), "--", sys.executable, script, *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=540)
    log.write_text(f"$ {' '.join(cmd)}\n--- stderr\n{proc.stderr}\n--- stdout\n{proc.stdout}")
    try:
        comparison = json.loads(proc.stdout).get("comparison") or {}
    except json.JSONDecodeError:
        comparison = {}
    j = comparison.get("judgement") or {}
    return {"knobs": knobs, "finding": finding.code, "top": top, "gain": comparison.get("gain"), "noise": j.get("noise"),
            "verdict": j.get("verdict"), "notes": comparison.get("notes") or [],
            "wall_s": round(time.perf_counter() - t0, 1)}


def try_applied(tried: dict | None) -> bool:
    """Whether ``run --try`` changed anything: not when a note says each of its knobs was not applied
    (``pin_memory`` on a script without a DataLoader); such a gain is noise, no reference."""
    if not tried or not tried.get("knobs"):
        return False
    knobs = {k.split("=")[0] for k in tried["knobs"].split(",")}
    void = {k.strip() for n in tried.get("notes") or [] if ": not applied" in n
            for k in n.split(": not applied")[0].split(",")}
    return not knobs <= void


def floor(reference: dict, fix: dict) -> float:
    """The bar: the reference gain minus the noise of the two measurements compared (root of the
    sum of squares: the reference's and the fix's own A/B are independent)."""
    return reference["gain"] - ((reference.get("noise") or 0.0) ** 2 + (fix.get("noise") or 0.0) ** 2) ** 0.5


def planted_outcome(name: str, fix: dict, tried: dict) -> str:
    """The bar for one planted row (pure: the stored row re-scores with ``--rescore``)."""
    gain = fix.get("gain")
    if not fix:
        return "fix failed (see its log)"
    if tried.get("gain") is not None and gain is not None and try_applied(tried):
        return (f"{'met' if gain >= floor(tried, fix) else 'not met'}: {gain:+.0%} vs --try {tried['gain']:+.0%} "
                "- noise")
    if gain is not None:
        why = "its knobs not applied (see its notes)" if tried.get("knobs") else "no --try knob for this finding"
        return f"patched: {gain:+.0%} (--try: {why}; the fix's own A/B is the measure)"
    if not fix.get("changes"):
        return "no change proposed" + (" (no finding with a code fix: as expected)" if name == "clean" else "")
    return "no change kept" + (" (its finding has no --try knob: the fix's own A/B decided)"
                               if tried.get("knobs") is None else "")


def planted(args, out: Path) -> list[dict]:
    """Each planted one-GPU workload: fix --write, then run --try of its top finding for the bar."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(harness.SRC), os.environ.get("PYTHONPATH", ""))
                                                       if p), "COLUMNS": "120", "PYTHONUNBUFFERED": "1"}
    rows, t_start = [], time.perf_counter()
    for name in [n for n in args.only.split(",") if n] or PLANTED:
        if time.perf_counter() - t_start > args.budget_s:
            rows.append({"name": name, "outcome": "not run (budget); run again with --only"})
            continue
        work = args.work / "planted" / name
        if work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True)
        shutil.copy(REPO / "src" / "gpudoctor" / "workloads" / f"{name}.py", work / f"{name}.py")
        extra = args.workload_args.split()
        res = gpudoctor_fix(work, f"{name}.py", extra, work / "fix-run", out / "logs-fix" / f"planted.{name}.log",
                            steps=args.steps, repeats=args.repeats, env=env, timeout_s=args.timeout_s)
        tried = try_gain(work, f"{name}.py.orig" if (work / f"{name}.py.orig").is_file() else f"{name}.py",
                         work / "fix-run" / "baseline", env, out / "logs-fix" / f"planted.{name}.try.log", args.steps,
                         extra)
        row = {"name": name, **res, "try": tried, "hand_fix": {"fix": tried.get("knobs"), "gain": tried.get("gain"),
                                                              "noise": tried.get("noise")}}
        row["outcome"] = planted_outcome(name, res.get("fix") or {}, tried)
        rows.append(row)
        print(f"  {name}: {row['outcome']} ({res['wall_s']} s)", flush=True)
    return rows


def ab_gains(paths: list[Path]) -> dict:
    """The hand fixes' measured gains (corpus-ab-*.json): name -> (fix, gain, noise)."""
    out = {}
    for path in paths:
        if path.is_file():
            for r in json.loads(path.read_text()).get("rows", []):
                m = r.get("measured") or {}
                if m.get("gain_median") is not None:
                    out[r["name"]] = {"fix": r.get("fix"), "gain": m["gain_median"], "noise": m.get("noise_a")}
    return out


def corpus(args, out: Path) -> list[dict]:
    harness.prepare_work(args.corpus, args.work, scale=1.0)
    verdicts = {r["name"]: r for r in json.loads(args.verdicts.read_text())["rows"]}
    hand = ab_gains(sorted(args.verdicts.parent.glob("corpus-ab-*.json")))
    rows, t_start = [], time.perf_counter()
    for script in select(args.only):
        v = (verdicts.get(script.name) or {}).get("verdict") or {}
        row = {"name": script.name, "verdict": v.get("code"), "hand_fix": hand.get(script.name)}
        if not v.get("code"):
            rows.append({**row, "outcome": "no WARN: no patch expected (not run)"})
            continue
        if time.perf_counter() - t_start > args.budget_s:
            rows.append({**row, "outcome": "not run (budget); run again with --only"})
            continue
        cwd = harness.make_variant(args.work, script, f"{script.name}__gdfix")
        env = harness.environment(script, cwd)
        res = gpudoctor_fix(cwd, script.script, list(script.args), args.work / "fix-runs" / script.name,
                            out / "logs-fix" / f"{script.name}.log", steps=args.steps, repeats=args.repeats,
                            env=env, timeout_s=args.timeout_s)
        row.update(res)
        fix = res.get("fix") or {}
        if args.reference == "try" and fix:  # the bar's reference, measured in this call on a fresh copy
            ref = harness.make_variant(args.work, script, f"{script.name}__try")
            row["try"] = try_gain(ref, script.script, args.work / "fix-runs" / script.name / "baseline",
                                  harness.environment(script, ref), out / "logs-fix" / f"{script.name}.try.log",
                                  args.steps, list(script.args), repeats=args.repeats)
        row["outcome"] = corpus_outcome(fix, row["hand_fix"], row.get("try"))
        rows.append(row)
        print(f"  {script.name}: {row['outcome']} ({res['wall_s']} s)", flush=True)
    return rows


# what fix patches for each hand fix of the corpus A/B (fixes.KIND_FOR_CODE); "batch" has no patch:
# a larger batch changes the optimisation, so fix prints it as advice and the A/B gain is no bar for it
HAND_TO_CHANGES = {"loader": {"loader"}, "nosync": {"item"}, "bf16": {"bf16", "tf32", "cudnn_benchmark", "channels_last"},
                   "channels_last": {"channels_last", "cudnn_benchmark"}, "nonblocking": {"non_blocking", "pin_memory"},
                   "compile": {"compile"}, "persistent": {"persistent"}, "epochboundary": {"persistent"}, "batch": set()}


def corpus_outcome(fix: dict, hand: dict | None, tried: dict | None) -> str:
    """The bar for one corpus row: the patch's gain >= the reference gain minus the noise of both
    (:func:`floor`).

    The reference is ``run --try`` of the top testable finding's knobs measured in the same call
    (``--reference try``), else the hand fix of the corpus A/B (another call: a data-bound
    baseline moves between calls more than its in-call noise) when fix kept the change that hand
    fix applies; a hand fix fix does not patch (a larger batch) is no bar."""
    if not fix:
        return "fix failed (see its log)"
    kept = {c["kind"] for c in fix.get("changes", []) if c.get("kept")}
    gain = fix.get("gain")
    if not kept or gain is None:
        return "no change kept" + ("; advice only" if fix.get("advice") else "")
    if tried and tried.get("gain") is not None and try_applied(tried):
        return (f"{'met' if gain >= floor(tried, fix) else 'not met'}: {gain:+.0%} vs --try {tried['knobs']} "
                f"{tried['gain']:+.0%} - noise (same call)")
    if hand and HAND_TO_CHANGES.get(hand.get("fix"), set()) & kept:
        return (f"{'met' if gain >= floor(hand, fix) else 'not met'}: {gain:+.0%} vs hand fix {hand['gain']:+.0%} "
                "- noise (another call)")
    why = f"hand fix '{hand['fix']}' is not what fix patches" if hand else "no hand fix"
    return f"patched: {gain:+.0%} ({why}; bar: --reference try)"


def rescore(doc: dict) -> dict:
    """A stored run's rows with their outcomes scored again (the measurements untouched)."""
    out = dict(doc)
    out["planted"] = [{**r, "outcome": planted_outcome(r["name"], r.get("fix") or {}, r.get("try") or {})}
                      if "rc" in r else r for r in doc.get("planted") or []]
    out["rows"] = [{**r, "outcome": corpus_outcome(r.get("fix") or {}, r.get("hand_fix"), r.get("try"))}
                   if "rc" in r else r for r in doc.get("rows") or []]
    return {k: v for k, v in out.items() if v or k not in ("planted", "rows")}


def markdown(doc: dict) -> str:
    lines = ["# gpudoctor fix on one GPU (issue 24)", "", f"GPU: {doc['gpu']}; steps per run {doc['steps']}; "
             f"at most {doc['repeats']} runs of each arm per change; verdict: the top finding of fix's baseline in "
             "this call where `--try` ran, else corpus-verdicts.json", ""]
    r = doc.get("readme")
    if r:
        lines += ["## README example (basic_user, data-loader bound)", "",
                  f"fixed/original throughput, median of {len(r.get('a') or [])} interleaved rounds: "
                  f"{r.get('ratio') and round(r['ratio'], 2)}x — {r.get('outcome')}", ""]
    for key, heading in (("planted", "Planted workloads (hand fix = run --try of the top finding)"),
                         ("rows", "Corpus (hand fix = corpus-ab, another call; --try = this call, same copy)")):
        if not doc.get(key):
            continue
        lines += [f"## {heading}", "", "| script | verdict | changes kept / proposed | gain (noise) | hand fix | "
                  "--try (noise) | outcome |", "|---|---|---|---|---|---|---|"]
        for row in doc[key]:
            fix = row.get("fix") or {}
            changes = fix.get("changes", [])
            kept = ", ".join(c["kind"] for c in changes if c.get("kept")) or "-"
            h = row.get("hand_fix") or {}
            gain = f"{fix['gain']:+.0%}" if fix.get("gain") is not None else "-"
            gain += f" ± {fix['noise']:.0%}" if fix.get("noise") is not None else ""
            hand = f"{h.get('fix')} {h['gain']:+.0%}" if h.get("gain") is not None else "-"
            t = row.get("try") or {}
            tried = (f"{t['knobs']} {t['gain']:+.0%}" + (f" ± {t['noise']:.0%}" if t.get("noise") is not None else "")
                     if t.get("gain") is not None else "-")
            verdict = t.get("top") or row.get("verdict") or t.get("finding") or "-"  # this call's baseline first
            lines.append(f"| {row['name']} | {verdict} | "
                         f"{kept} / {len(changes)} | {gain} | {hand} | {tried} | {row.get('outcome')} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--readme", action="store_true", help="the README example's bar")
    p.add_argument("--workload-args", default="", help='the README and planted workloads\' arguments (the CPU '
                   'check: "--size tiny")')
    p.add_argument("--planted", action="store_true", help="the planted one-GPU workloads (--only: a subset)")
    p.add_argument("--corpus", type=Path, default=None, help="the carried corpus folder (.corpus)")
    p.add_argument("--verdicts", type=Path, default=REPO / "benchmarks/results/corpus/corpus-verdicts.json")
    p.add_argument("--work", type=Path, default=Path("/tmp/gpudoctor-fix-bars"))
    p.add_argument("--only", default="")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--timeout-s", type=float, default=540.0)
    p.add_argument("--budget-s", type=float, default=420.0)
    p.add_argument("--reference", choices=("hand", "try"), default="hand",
                   help="the corpus bar's reference: the A/B hand fix (another call), or run --try of the top "
                        "testable finding's knobs measured in this call after each fix (about as long again)")
    p.add_argument("--rescore", type=Path, default=None, metavar="FIX_BARS_JSON",
                   help="no run: the outcomes of a stored fix-bars.json scored again by this file's bar, "
                        "written to --out")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.rescore is not None:
        doc = rescore(json.loads(args.rescore.read_text()))
        (args.out / "fix-bars.json").write_text(json.dumps(doc, indent=2))
        (args.out / "fix-bars.md").write_text(markdown(doc))
        print(markdown(doc))
        return
    (args.out / "logs-fix").mkdir(exist_ok=True)
    doc = {"what": "gpudoctor fix --write, then original vs fixed", "gpu": harness.gpu_name(), "steps": args.steps,
           "repeats": args.repeats, "reference": args.reference}
    if args.readme:
        doc["readme"] = readme(args, args.out)
    if args.planted:
        doc["planted"] = planted(args, args.out)
    if args.corpus is not None:
        doc["rows"] = corpus(args, args.out)
    (args.out / "fix-bars.json").write_text(json.dumps(doc, indent=2))
    (args.out / "fix-bars.md").write_text(markdown(doc))
    print(markdown(doc))


if __name__ == "__main__":
    main()
