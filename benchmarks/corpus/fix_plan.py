"""``gpudoctor fix``'s patch for each corpus script, planned on the CPU from its H200 recording: no GPU.

``gpudoctor fix`` has no ``--from RUN_DIR``: it always runs the script first. What it does with that
run is three library calls, and this script makes them on a recorded run instead
(``gpudoctor.fix.project.locate_project``, ``gpudoctor.fix.plan.plan_fix`` with the findings
``diagnose`` gives today, ``gpudoctor.cli.fix_flow.patch_all``): the same diff ``fix`` would
measure, before any GPU time is spent on it.

Findings: the recording's (``tests/fixtures/runs_corpus/<name>``, or ``tests/fixtures/fix/corpus_runs/
<name>``), re-diagnosed with today's analysis; for a script without a recording (``UNRECORDED``), its
verdict in ``corpus-verdicts.json`` (the H200 call-1 run) as one WARN finding, with the loader the
script builds on one GPU (read from its source, below) on a 16-core host (the H200 machine's).

For each script: the change kinds, the files changed, each change's first changed line, the advice,
whether every changed file parses; ``--run``: the original and the patched copy each run on the CPU
under ``gpudoctor run --steps N`` with the manifest's CPU arguments, and the first steps' losses.

    PYTHONPATH=src:<torchvision dir> python3 benchmarks/corpus/fix_plan.py --corpus .corpus --out /tmp/fixplan [--run]

Writes OUT/plan.json, OUT/plan.md and OUT/<name>.diff (the diffs quote the public scripts: not committed).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
from manifest import select  # noqa: E402

REPO = harness.REPO_ROOT
RECORDINGS = (REPO / "tests/fixtures/runs_corpus", REPO / "tests/fixtures/fix/corpus_runs")
VERDICTS = REPO / "benchmarks/results/corpus/corpus-verdicts.json"
CORES = 16  # the H200 machine's usable CPUs (every recording's config says 16)
# the loader each unrecorded script builds on one GPU, from its source (pytorch/examples @ 77f55b9):
# mnist_rnn: kwargs = {'num_workers': 1, 'pin_memory': True} if args.accel; batch 64, shuffled;
# word_language_model: no DataLoader (batches sliced from one tensor)
UNRECORDED = {
    "mnist_rnn": dict(num_workers=1, pin_memory=True, persistent_workers=False, prefetch_factor=2, batch_size=64,
                      drop_last=False, sampler="RandomSampler", dataset="MNIST"),
    "word_language_model": None,
}


def recorded_findings(name: str, verdicts: dict):
    """(findings, config, where they came from) for corpus script ``name``."""
    from gpudoctor.analysis.diagnose import diagnose
    from gpudoctor.records.finding import Finding, Severity
    from gpudoctor.records.rundir import load_run
    from gpudoctor.records.run import LoaderConfig, RankConfig

    for root in RECORDINGS:
        if (root / name / "manifest.json").is_file():
            run = load_run(root / name)
            return list(diagnose(run)), run.configs[min(run.configs)], str((root / name).relative_to(REPO))
    v = (verdicts.get(name) or {}).get("verdict") or {}
    if not v.get("code") or name not in UNRECORDED:
        return [], None, "no recording, no verdict"
    loader = UNRECORDED[name]
    config = RankConfig(rank=0, local_rank=0, world_size=1, pid=0, device="cuda:0", device_name="NVIDIA H200",
                        usable_cpus=CORES, loaders=(LoaderConfig(**loader),) if loader else ())
    finding = Finding(code=v["code"], severity=Severity.WARN, title=v.get("title", v["code"]), evidence=(),
                      fix=v.get("fix", ""))
    return [finding], config, "corpus-verdicts.json (call 1) + the loader from the source"


def plan_one(script, work: Path, verdicts: dict) -> dict:
    """Plan and patch a fresh copy of ``script`` (``WORK/fix-<name>``) as ``gpudoctor fix`` would."""
    from gpudoctor.cli.fix_flow import patch_all
    from gpudoctor.fix.options import command_line
    from gpudoctor.fix.plan import plan_fix
    from gpudoctor.fix.project import locate_project
    from gpudoctor.fix.view import unified_diff

    findings, config, origin = recorded_findings(script.name, verdicts)
    cwd = harness.make_variant(work, script, f"fix-{script.name}")
    path = cwd / script.script
    source = path.read_text(encoding="utf-8")
    found = locate_project(path, source)
    plan = plan_fix(found, findings, config)
    sources = {"": source}
    if found.file:
        sources[found.file] = Path(found.file).read_text(encoding="utf-8")
    fixed, dropped = patch_all(sources, path, plan.changes)
    repo_root = work / f"fix-{script.name}" / script.repo

    def rel(f: str) -> str:
        return (Path(f) if f else path).resolve().relative_to(repo_root.resolve()).as_posix()

    changed = [f for f in sources if fixed[f] != sources[f]]
    parses = {}
    for f in changed:
        try:
            ast.parse(fixed[f])
            parses[rel(f)] = True
        except SyntaxError:
            parses[rel(f)] = False
        (Path(f) if f else path).write_text(fixed[f], encoding="utf-8")  # the variant is now the patched copy
    diff = "".join(unified_diff(sources[f], fixed[f], rel(f)) for f in changed)
    top = next((f for f in findings if f.severity.value != "info"), None)
    edits = [e for c in plan.changes for e in c.options]
    argv, said = command_line(tuple(script.args), edits)
    return {
        "name": script.name, "origin": origin,
        "findings": [f"{f.severity.value} {f.code}" for f in findings],
        "top": top.code if top else None,
        "changes": [{"kind": c.kind, "code": c.code, "file": rel(c.file), "precision": c.precision,
                     "lines": sorted({o.at[0] for o in c.ops})
                     if c.ops else []} for c in plan.changes],
        "dropped": [c.kind for c in dropped],
        "advice": [{"code": a.code, "reason": a.reason} for a in plan.advice],
        "files": [rel(f) for f in changed], "parses": parses, "diff": diff, "cwd": str(cwd),
        # the options whose defaults the patch sets, on the H200 command line (manifest args)
        "options": [{"flags": list(e.flags), "default": e.value, "was": e.was, "set": how[0] if how else None,
                     "run_with": how[1] if how else None} for e, how in said],
        "command": list(argv), "edits": edits,
        "top_patched": bool(top) and any(c.code == top.code for c in plan.changes),
    }


def run_cpu(script, work: Path, out: Path, row: dict, steps: int, timeout_scale: float) -> None:
    """The original (``WORK/orig``'s copy) and the patched copy, each ``gpudoctor run --steps`` on the CPU."""
    from gpudoctor.fix.view import losses
    from gpudoctor.records.rundir import load_run

    import dataclasses

    from gpudoctor.fix.options import command_line

    arms = {"original": harness.make_variant(work, script, f"orig-{script.name}"), "patched": Path(row["cwd"])}
    # the patched copy runs with the CPU command line fix would measure: an option whose default
    # the patch set, given there (imagenet's -j 0), gets the new value
    patched = dataclasses.replace(script, cpu_args=command_line(tuple(script.cpu_args), row["edits"])[0])
    for arm, cwd in arms.items():
        run_dir = work / "runs" / f"{script.name}-{arm}"
        # a loaded 2-core CPU: minGPT's evaluation at iteration 0 takes longer than run's 30 s stall limit
        res = harness.gpudoctor_run(patched if arm == "patched" else script, cwd, run_dir, steps=steps, cpu=True,
                                    timeout_s=script.timeout_s * timeout_scale, log=out / f"{script.name}.{arm}.log",
                                    first_step_timeout=script.timeout_s * timeout_scale,
                                    stall_timeout=script.timeout_s * timeout_scale)
        try:
            run = load_run(run_dir)
            status, loss, steps_done = run.manifest.status, losses(run, steps), len(run.steps.get(min(run.steps), ()))
        except Exception as exc:  # noqa: BLE001 - the row says what failed
            status, loss, steps_done = f"unreadable ({exc})", [], 0
        row.setdefault("cpu", {})[arm] = {"rc": res["rc"], "wall_s": res["wall_s"], "status": status,
                                          "steps": steps_done, "loss": loss}
        print(f"  {script.name} {arm}: rc {res['rc']} {status} {steps_done} steps, {res['wall_s']} s", flush=True)


def markdown(rows: list[dict], cpu_steps: int | None) -> str:
    lines = ["# gpudoctor fix's patch for each corpus script, planned from its H200 recording (CPU, no GPU run)", "",
             "| script | findings (WARN first) | changes planned (file: line) | advice | parses | top finding patched |"
             " command line (H200 args) |"
             + (f" CPU {cpu_steps} steps: original / patched | first losses equal |" if cpu_steps else ""),
             "|---|---|---|---|---|---|---|" + ("---|---|" if cpu_steps else "")]
    for r in rows:
        warn = ", ".join(f.split()[1] for f in r["findings"] if not f.startswith("info")) or "-"
        changes = "; ".join(f"{c['kind']} ({c['file']}: {', '.join(map(str, c['lines']))})" for c in r["changes"]) or "-"
        advice = "; ".join(a["reason"].split(":")[0] for a in r["advice"]) or "-"
        line = (f"| {r['name']} | {warn} | {changes} | {advice} | "
                f"{'yes' if all(r['parses'].values()) else 'NO'} | {'yes' if r['top_patched'] else 'no'} | "
                f"{_options(r['options'])} |")
        if cpu_steps:
            cpu = r.get("cpu") or {}
            o, p = cpu.get("original") or {}, cpu.get("patched") or {}
            same = "-" if not (o.get("loss") and p.get("loss")) else (
                "yes" if o["loss"] == p["loss"] else
                f"no (max diff {max(abs(a - b) for a, b in zip(o['loss'], p['loss']) if a is not None and b is not None):.2g})")
            line += (f" {o.get('status', '-')} {o.get('steps', '-')} / {p.get('status', '-')} {p.get('steps', '-')} |"
                     f" {same} |")
        lines.append(line)
    return "\n".join(lines) + "\n"


def _options(options: list[dict]) -> str:
    """The options whose defaults the patch sets: how the H200 command line is to change."""
    return "; ".join(f"{o['set']} -> {o['run_with']}" if o["set"] else f"{'/'.join(o['flags'])}: default "
                     f"{o['was']} -> {o['default']}" for o in options) or "-"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", type=Path, default=harness.DEFAULT_CORPUS)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--work", type=Path, default=Path("/tmp/gpudoctor-fix-plan"))
    p.add_argument("--only", default="")
    p.add_argument("--run", action="store_true", help="run the original and the patched copy on the CPU")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--timeout-scale", type=float, default=3.0)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    harness.prepare_work(args.corpus, args.work, scale=0.1, make=args.run)
    verdicts = {r["name"]: r for r in json.loads(VERDICTS.read_text())["rows"]}
    rows = []
    t0 = time.perf_counter()
    for script in select(args.only):
        row = plan_one(script, args.work, verdicts)
        (args.out / f"{script.name}.diff").write_text(row["diff"])
        print(f"{script.name}: {[c['kind'] for c in row['changes']]} advice {[a['reason'][:60] for a in row['advice']]}",
              flush=True)
        if args.run and script.cpu_ok and row["files"]:
            run_cpu(script, args.work, args.out, row, args.steps, args.timeout_scale)
        rows.append(row)
    # the diffs quote the public scripts: OUT/<name>.diff only, never in the table a repository keeps
    doc = {"what": "gpudoctor fix's plan from recorded H200 runs, on the CPU", "steps": args.steps if args.run else None,
           "wall_s": round(time.perf_counter() - t0, 1),
           "rows": [{k: v for k, v in r.items() if k not in ("diff", "cwd", "edits")} for r in rows]}
    (args.out / "plan.json").write_text(json.dumps(doc, indent=2))
    (args.out / "plan.md").write_text(markdown(rows, args.steps if args.run else None))
    print(markdown(rows, args.steps if args.run else None))


if __name__ == "__main__":
    main()
