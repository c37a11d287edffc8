"""`gpudoctor lint` on a held-out set of planted pitfalls and near-misses: recall and precision.

A set is ``benchmarks/heldout/<set>/``: ``projects/<project>/...`` and ``labels.toml`` (every
planted ``[[pitfall]]`` with its file, line(s) and kind; every clean ``[[near_miss]]``), written by
someone who had not read the lint rules.

    python benchmarks/lint_heldout.py --set lint-1 --label before \
        --out benchmarks/results/lint_heldout/lint-1-before.json

Each project is linted on its own (``python -m gpudoctor lint --isolated --exit-zero
--output-format json projects/<project>``; GD9xx rules stay off, as for a user). A pitfall is
*found* when a finding of one of its kind's codes (``KIND_CODES``, or an ``alt_kinds`` kind's) sits
on its line or one of its ``lines`` (one line of slack either way: a rule may point at the call or
at its statement's first line). A finding is a *true positive* when it found a pitfall, a *false
positive* when it sits on a near-miss line, and *unjudged* otherwise: those are listed for a person
to judge by reading, and the headline precision counts them as false until judged.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HELDOUT = ROOT / "benchmarks" / "heldout"
SLACK = 1

# pitfall kind -> the lint codes that name it (written before the first score, from each rule's
# one-line summary); an empty tuple: no rule names that pitfall yet.
KIND_CODES: dict[str, tuple[str, ...]] = {
    "loss_graph_accumulated": ("GD201", "GD202"),
    "sync_per_step": ("GD502",),
    "missing_zero_grad": ("GD602",),
    "eval_no_grad": ("GD205",),
    "eval_mode_missing": (),
    "sampler_set_epoch": ("GD405",),
    "shuffle_with_sampler": ("GD406",),
    "save_wrapper_state_dict": ("GD407",),
    "save_whole_module": (),
    "load_unsafe": ("GD601",),
    "load_every_rank_no_map_location": (),
    "non_blocking_unpinned": (),
    "pin_without_non_blocking": (),
    "loader_no_workers": ("GD104",),
    "cudnn_benchmark_dynamic_shapes": (),
    "empty_cache_in_loop": ("GD203",),
    "frozen_net_with_grad": (),
    "gan_fake_not_detached": (),
    "fsdp_clip_grad_norm": (),
    "sampling_loop_with_grad": ("GD205",),
    "scaler_unscale_before_clip": ("GD303",),
    "fp16_without_scaler": (),
    "cuda_in_dataset_worker": ("GD102",),
    "ddp_no_set_device": ("GD403",),
    "ddp_no_distributed_sampler": ("GD409",),
}
# codes of rules added after lint-1's before score, each to the one kind whose pitfall it names
for kind, code in (("save_whole_module", "GD604"), ("fsdp_clip_grad_norm", "GD414"),
                   ("non_blocking_unpinned", "GD107"), ("load_every_rank_no_map_location", "GD415"),
                   ("sampling_loop_with_grad", "GD206")):
    KIND_CODES[kind] += (code,)


def lint(project: Path) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "lint", "--isolated", "--exit-zero",
                           "--output-format", "json", "."], capture_output=True, text=True, cwd=project)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"lint failed on {project}: {proc.stderr[-500:]}")
    return json.loads(proc.stdout)["violations"]


def _where(row: dict) -> tuple[str, str, int | None, set[int]]:
    lines = {row["line"], *row.get("lines", [])}
    return row["project"], row["file"], row.get("cell"), lines


def _finding_where(project: str, v: dict) -> tuple[str, str, int | None, int]:
    path = v["path"].removeprefix("./")
    cell = v.get("cell")
    return project, path, cell, v["line"]


def score(set_name: str) -> dict:
    base = HELDOUT / set_name
    labels = tomllib.loads((base / "labels.toml").read_text())
    pitfalls, near = labels.get("pitfall", []), labels.get("near_miss", [])
    findings = []
    for project in sorted(p for p in (base / "projects").iterdir() if p.is_dir()):
        findings += [(_finding_where(project.name, v), v) for v in lint(project)]
    found, used = [], set()
    for i, p in enumerate(pitfalls):
        proj, file, cell, lines = _where(p)
        codes = set(KIND_CODES.get(p["kind"], ()))
        for k in p.get("alt_kinds", []):
            codes |= set(KIND_CODES.get(k, ()))
        hit = [j for j, ((fp, ff, fc, fl), v) in enumerate(findings)
               if fp == proj and ff == file and fc == cell and v["code"] in codes
               and any(abs(fl - ln) <= SLACK for ln in lines)]
        found.append(bool(hit))
        used.update(hit)
    near_lines = {(n["project"], n["file"], n.get("cell"), n["line"]) for n in near}
    fp_near, unjudged = [], []
    for j, ((fp, ff, fc, fl), v) in enumerate(findings):
        if j in used:
            continue
        row = {"project": fp, "file": ff, "cell": fc, "line": fl, "code": v["code"], "message": v["message"]}
        (fp_near if any((fp, ff, fc, fl + d) in near_lines for d in range(-SLACK, SLACK + 1))
         else unjudged).append(row)
    tp = len(used)
    kinds: dict[str, list[int]] = {}
    for p, ok in zip(pitfalls, found):
        kinds.setdefault(p["kind"], [0, 0])
        kinds[p["kind"]][0] += ok
        kinds[p["kind"]][1] += 1
    return {"pitfalls": len(pitfalls), "found": sum(found), "recall": round(sum(found) / len(pitfalls), 3),
            "findings": len(findings), "true_positive_findings": tp, "false_positive_near_miss": fp_near,
            "unjudged": unjudged,
            "precision_unjudged_as_false": round(tp / len(findings), 3) if findings else None,
            "by_kind": kinds,
            "missed": [f"{p['project']}/{p['file']}:{p['line']} {p['kind']}" for p, ok in zip(pitfalls, found) if not ok]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", required=True)
    parser.add_argument("--label", default="")
    parser.add_argument("--out")
    ns = parser.parse_args()
    result = score(ns.set)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    result = {"label": ns.label, "set": ns.set, "command": " ".join(sys.argv), "commit": commit,
              "date": time.strftime("%Y-%m-%d"), **result}
    print(f"{ns.set} ({ns.label}): recall {result['found']}/{result['pitfalls']} = {result['recall']}; "
          f"{result['findings']} findings, {result['true_positive_findings']} on planted pitfalls, "
          f"{len(result['false_positive_near_miss'])} on near-misses, {len(result['unjudged'])} unjudged")
    for row in result["false_positive_near_miss"] + result["unjudged"]:
        print(f"  {row['project']}/{row['file']}:{row['line']} {row['code']} {row['message'][:90]}")
    if ns.out:
        Path(ns.out).parent.mkdir(parents=True, exist_ok=True)
        Path(ns.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
