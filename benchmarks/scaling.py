"""Scaling run (issue 11): collective bandwidth, DDP/FSDP2 training throughput, a planted straggler.

    PYTHONPATH=src python benchmarks/scaling.py --out benchmarks/results/scaling-8gpu.json \\
        [--world-sizes 1,2,4,8] [--quick] [--cpu]

Works for any world size on whatever GPUs are visible; world sizes above that count are skipped
and recorded. Three parts, each run in its own subprocess(es), each failing on its own (a crash
or timeout is recorded and the next part still runs):

1. ``collectives``: all_reduce bus bandwidth, fp32, 1 MiB to 4 GiB (x2 steps; ``--quick`` x4) at
   the largest world size, through ``gpudoctor.bench.collectives.launch_collectives`` (torchrun,
   the shared timing protocol, nccl-tests' busbw = algbw x 2(n-1)/n, ``NCCL_NVLS_ENABLE=0``).
2. ``straggler``: ``gpudoctor run`` on the ``straggler`` workload at the largest world size with
   a planted slow rank (rank 5 at 8 ranks, otherwise the last rank); ``diagnose`` must name it
   (``GD-RUN-STRAGGLER``). The per-rank time spent waiting in collectives, read from the run's
   profiler windows, is recorded next to it as a cross-check.
3. ``training``: GPT-2 124M and ResNet-18 through ``gpudoctor.train`` at each world size, DDP and
   FSDP2 (``benchmarks/scaling_worker.py``: one ``python -m torch.distributed.run`` launch per world
   size running every (strategy, model) pair in turn, so start-up is paid once per world size; one
   process is the unwrapped single-GPU baseline).
   Scaling efficiency = throughput(N) / (N x throughput(1)); goal: >= 90% at 8 GPUs for GPT-124M.

Time budget on 8 H200s (``--budget-s``, default 540 s, under the 10-minute device call; every launch
gets at most what is left of it, and one that would get under 45 s is skipped and recorded):
collectives ~40 s, straggler ~45 s, training 4 launches (1, 2, 4, 8 ranks) x ~60-90 s (torchrun
start, NCCL init, then per strategy eager GPT-124M 10+30 steps at 16x1024 tokens per GPU and
ResNet-18 20+100 steps at 512 images per GPU); estimates, not yet measured on 8 GPUs. ``--cpu``
(tests): gloo, a tiny GPT, ResNet-18 on 8x8 images, the CPU collective sizes; the test runs
``--cpu --quick --world-sizes 1,2`` (about 40-50 s on the 2-core development machine).

Prints a table and writes ``--out`` (JSON): the exact command, the visible device count, every
figure, and which parts or world sizes were skipped and why.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
WORKER = Path(__file__).resolve().parent / "scaling_worker.py"
sys.path.insert(0, str(SRC))
from gpudoctor.records.units import MIB  # noqa: E402
from gpudoctor.records.atomic import write_text_atomic  # noqa: E402
GPU_SIZES = tuple(MIB << k for k in range(13))  # 1 MiB .. 4 GiB, x2
GPU_QUICK_SIZES = tuple(MIB << k for k in range(0, 13, 2))  # 1 MiB .. 4 GiB, x4
GOAL_EFFICIENCY, GOAL_MODEL, GOAL_WORLD = 0.90, "gpt", 8
MODEL_NAMES = {"gpt": "GPT-2 124M", "resnet": "ResNet-18"}
REFERENCE_BUSBW = "nccl-tests all_reduce busbw: about 475 GB/s on 8 x H200, 370 GB/s on 8 x H100 (no NVLS)"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    env["NCCL_NVLS_ENABLE"] = "0"  # busbw must reflect the wire (nccl-tests#212)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _run(cmd: list[str], timeout_s: float) -> tuple[int, str]:
    """Run ``cmd`` (a list, no shell) in its own process group: (exit code, stderr); 124 on timeout.

    On timeout the whole group is killed, torchrun's workers included: a killed torchrun alone
    would leave ranks holding the GPUs for the next launch.
    """
    from gpudoctor.core.process_group import run_process_group

    try:
        proc = run_process_group(cmd, env=_env(), timeout_s=timeout_s)
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout_s:.0f} s"
    return proc.returncode, proc.stderr


def _tail(text: str, lines: int = 4) -> str:
    return " | ".join((text or "").strip().splitlines()[-lines:])[-600:]


def launch_timeout(deadline: float, timeout_s: float, need_s: float) -> float | None:
    """Seconds a launch may take: ``timeout_s`` capped by what is left of the budget; ``None``
    when less than ``need_s`` is left (the launch is skipped, not started to be killed)."""
    left = deadline - time.perf_counter()
    return None if left < need_s else min(timeout_s, left)


def run_part(name: str, fn, doc: dict) -> None:
    """Run one part; an exception is recorded as the part's failure, never raised."""
    t0 = time.perf_counter()
    print(f"[scaling] {name} ...", flush=True)
    try:
        doc["parts"][name] = fn()
    except Exception as exc:  # noqa: BLE001 - one part's crash must not stop the others
        doc["parts"][name] = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"[:600],
                              "traceback": traceback.format_exc()[-2000:]}
    doc["parts"][name]["wall_s"] = round(time.perf_counter() - t0, 1)
    print(f"[scaling] {name}: {doc['parts'][name]['status']} in {doc['parts'][name]['wall_s']} s", flush=True)


# ---------------------------------------------------------------------------------- part 1
def collectives_part(world: int, *, quick: bool, cpu: bool, timeout_s: float, deadline: float, need_s: float) -> dict:
    if world < 2:
        return {"status": "skipped", "reason": "a collective needs at least 2 ranks; only 1 runnable here"}
    timeout_s = launch_timeout(deadline, timeout_s, need_s)
    if timeout_s is None:
        return {"status": "skipped", "reason": "time budget (--budget-s) used up"}
    from gpudoctor.bench.collectives import launch_collectives

    # on the CPU the module's own (small) gloo sizes; 4 GiB over gloo would take minutes
    sizes = None if cpu else (GPU_QUICK_SIZES if quick else GPU_SIZES)
    results, skipped = launch_collectives(world, ops=("all_reduce",), sizes=sizes, quick=quick, timeout_s=timeout_s)
    rows = [{"size": r.size, "size_bytes": r.size_bytes, "busbw_gbs": r.median, "busbw_p10": r.p10,
             "busbw_p90": r.p90, "algbw_gbs": r.algbw_gbs, "time_ms": r.time_ms, "repeats": r.repeats,
             "device": r.device} for r in results]
    out = {"status": "ok" if rows else "failed", "world_size": world, "op": "all_reduce", "dtype": "fp32",
           "results": rows, "skipped": [{"what": s.what, "reason": s.reason} for s in skipped],
           "reference": REFERENCE_BUSBW,
           "peak_busbw_gbs": max((r["busbw_gbs"] for r in rows if r["busbw_gbs"]), default=None)}
    if cpu:
        out["note"] = "CPU (gloo): the module's CPU sizes instead of 1 MiB-4 GiB"
    if not rows:
        out["error"] = "; ".join(s["reason"] for s in out["skipped"]) or "no results"
    return out


# ---------------------------------------------------------------------------------- part 2
def straggler_rank(world: int) -> int:
    """Rank 5 at 8 ranks (the issue's example), otherwise the last rank."""
    return 5 if world == 8 else world - 1


def comm_wait_ms(run) -> dict[int, float]:
    """Per rank, ms per step inside collectives in the profiler window (NCCL kernels or gloo ops)."""
    waits = {}
    for rank, w in sorted(run.windows.items()):
        steps = max(w.last_step - w.first_step + 1, 1)
        total = sum(op.total_us for op in w.top_ops if op.kind == "nccl" or op.name.startswith("gloo:"))
        waits[rank] = total / 1000.0 / steps
    return waits


def straggler_part(world: int, *, quick: bool, cpu: bool, timeout_s: float, deadline: float, need_s: float) -> dict:
    if world < 2:
        return {"status": "skipped", "reason": "a straggler needs at least 2 ranks; only 1 runnable here"}
    timeout_s = launch_timeout(deadline, timeout_s, need_s)
    if timeout_s is None:
        return {"status": "skipped", "reason": "time budget (--budget-s) used up"}
    from gpudoctor.analysis.diagnose import diagnose
    from gpudoctor.records.rundir import load_run
    from gpudoctor.workloads import WORKLOADS

    slow = straggler_rank(world)
    # steps recorded: the straggler rule judges only with >= 20 steady steps per rank after warm-up
    size, steps = ("tiny", 30) if cpu else ("small", 40 if quick else 60)
    workload = WORKLOADS["straggler"]
    tmp = Path(tempfile.mkdtemp(prefix="gpudoctor-scaling-"))
    try:
        run_dir = tmp / "run"
        cmd = [sys.executable, "-m", "gpudoctor", "run", "--steps", str(steps), "--fail-on", "never",
               "--out", str(run_dir), "--",
               *workload.argv(size=size, steps=steps + 20, python=sys.executable, nproc=world),
               "--straggler-rank", str(slow)]
        out = {"world_size": world, "planted_rank": slow, "workload": workload.name, "size": size,
               "steps": steps, "command": cmd}
        out["rc"], err = _run(cmd, timeout_s)
        if out["rc"] == 124:
            return {**out, "status": "failed", "error": f"gpudoctor run {err}"}
        if not (run_dir / "manifest.json").is_file():
            return {**out, "status": "failed", "error": f"no run directory; exit {out['rc']}: {_tail(err)}"}
        run = load_run(run_dir)
        findings = diagnose(run)
        hit = next((f for f in findings if f.code == workload.planted), None)
        named = int(m.group(1)) if hit and (m := re.search(r"rank (\d+)", hit.title)) else None
        waits = comm_wait_ms(run)
        out.update({
            "findings": [f"{f.severity.value}:{f.code}" for f in findings],
            "straggler_finding": None if hit is None else {"title": hit.title, "evidence": list(hit.evidence)},
            "named_rank": named, "ok": named == slow,
            "comm_wait_ms_per_step": {str(r): round(v, 3) for r, v in waits.items()},
            # the rank the others wait for waits least itself
            "least_waiting_rank": min(waits, key=waits.get) if len(waits) >= 2 else None,
        })
        out["status"] = "ok" if out["ok"] else "failed"
        if named is None:
            out["error"] = f"diagnose did not report {workload.planted}: {', '.join(out['findings']) or 'no findings'}"
        elif named != slow:
            out["error"] = f"diagnose named rank {named}, the planted straggler is rank {slow}"
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------- part 3
def launch_training(world: int, *, quick: bool, cpu: bool, timeout_s: float) -> list[dict]:
    """One torchrun launch of the worker at ``world`` ranks: every (strategy, model) pair in turn.

    One row per pair, failures included (a crashed or timed-out launch fails the pairs it had not
    written yet). One process is the unwrapped baseline, so it runs each model once.
    """
    strategies = ("ddp",) if world == 1 else ("ddp", "fsdp")
    with tempfile.TemporaryDirectory(prefix="gpudoctor-scaling-") as tmp:
        out_file = Path(tmp) / "train.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(world),
               str(WORKER), "--models", ",".join(MODEL_NAMES), "--strategies", ",".join(strategies),
               "--out", str(out_file)]
        cmd += ["--quick"] * quick + ["--cpu"] * cpu
        t0 = time.perf_counter()
        rc, err = _run(cmd, timeout_s)
        err = _tail(err)
        wall = round(time.perf_counter() - t0, 1)
        rows = json.loads(out_file.read_text())["results"] if out_file.is_file() else []
    labels = [s if world > 1 else "none" for s in strategies]
    done = {(r["strategy"], r["model"]) for r in rows}
    rows += [{"model": m, "strategy": s, "status": "failed", "error": f"launch exit {rc}: {err}"}
             for s in labels for m in MODEL_NAMES if (s, m) not in done]
    return [{**r, "world_size": world, "command": cmd, "launch_wall_s": wall} for r in rows]


def efficiencies(rows: list[dict]) -> list[dict]:
    base = {r["model"]: r["throughput"] for r in rows if r["world_size"] == 1 and r["status"] == "ok"}
    out = []
    for r in rows:
        if r["world_size"] > 1 and r["status"] == "ok" and base.get(r["model"]):
            out.append({"model": r["model"], "strategy": r["strategy"], "world_size": r["world_size"],
                        "efficiency": r["throughput"] / (r["world_size"] * base[r["model"]])})
    return out


def goal(effs: list[dict]) -> dict:
    at = [e for e in effs if e["model"] == GOAL_MODEL and e["world_size"] == GOAL_WORLD]
    text = f"scaling efficiency >= {GOAL_EFFICIENCY:.0%} at {GOAL_WORLD} GPUs for {MODEL_NAMES[GOAL_MODEL]}"
    if not at:
        return {"goal": text, "met": None, "why": f"{MODEL_NAMES[GOAL_MODEL]} was not measured at {GOAL_WORLD} ranks"}
    return {"goal": text, "met": {e["strategy"]: e["efficiency"] >= GOAL_EFFICIENCY for e in at},
            "efficiency": {e["strategy"]: e["efficiency"] for e in at}}


def training_part(worlds: list[int], *, quick: bool, cpu: bool, timeout_s: float, deadline: float,
                  need_s: float) -> dict:
    rows, skipped = [], []
    for world in worlds:
        timeout = launch_timeout(deadline, timeout_s, need_s)
        if timeout is None:
            skipped.append({"what": f"training at {world} rank(s)", "reason": "time budget (--budget-s) used up"})
            continue
        print(f"[scaling]   training at {world} rank(s)", flush=True)
        rows += launch_training(world, quick=quick, cpu=cpu, timeout_s=timeout)
    effs = efficiencies(rows)
    ok = [r for r in rows if r["status"] == "ok"]
    return {"status": "ok" if ok and len(ok) == len(rows) else ("partial" if ok else "failed"),
            "results": rows, "efficiency": effs, "goal": goal(effs), "skipped": skipped,
            "timing": "weak scaling: same per-device batch at every world size; CUDA events around the "
                      "timed steps, one sync at the end; eager (no torch.compile)"}


# ---------------------------------------------------------------------------------- report
def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render(doc: dict) -> str:
    """The plain-text table printed at the end (also tested against a golden file)."""
    lines = [f"scaling run: {doc['visible_devices']} visible {doc['device_kind']}(s), "
             f"world sizes {','.join(map(str, doc['world_sizes']))}"]
    lines += [f"  skipped: {s['what']}: {s['reason']}" for s in doc["skipped"]]
    parts = doc["parts"]
    coll = parts.get("collectives", {})
    lines.append(f"\n1. all_reduce bus bandwidth ({coll.get('status', 'not run')}"
                 + (f", {coll['world_size']} ranks)" if "world_size" in coll else ")"))
    if coll.get("results"):
        lines.append(f"  {'size':>10} {'busbw GB/s':>11} {'p10-p90':>17} {'time ms':>10}")
        for r in coll["results"]:
            lines.append(f"  {r['size']:>10} {_fmt(r['busbw_gbs'], '.2f'):>11} "
                         f"{_fmt(r['busbw_p10'], '.2f') + '-' + _fmt(r['busbw_p90'], '.2f'):>17} "
                         f"{_fmt(r['time_ms'], '.3f'):>10}")
        lines.append(f"  reference: {coll['reference']}")
    lines += [f"  {k}: {coll[k]}" for k in ("reason", "error", "note") if coll.get(k)]
    st = parts.get("straggler", {})
    lines.append(f"\n2. planted straggler under gpudoctor run ({st.get('status', 'not run')})")
    if "planted_rank" in st:
        lines.append(f"  planted rank {st['planted_rank']} of {st['world_size']}; diagnose named "
                     f"{'rank ' + str(st['named_rank']) if st.get('named_rank') is not None else 'no straggler'}"
                     + (f"; least time in collectives: rank {st['least_waiting_rank']}"
                        if st.get("least_waiting_rank") is not None else ""))
    lines += [f"  {k}: {st[k]}" for k in ("reason", "error", "note") if st.get(k)]
    tr = parts.get("training", {})
    lines.append(f"\n3. training throughput ({tr.get('status', 'not run')})")
    effs = {(e["model"], e["strategy"], e["world_size"]): e["efficiency"] for e in tr.get("efficiency", [])}
    if tr.get("results"):
        lines.append(f"  {'model':32} {'strategy':8} {'ranks':>5} {'throughput':>18} {'efficiency':>10}")
        for r in tr["results"]:
            shown = f"{r['throughput']:,.0f} {r['unit']}" if r["status"] == "ok" else "failed"
            eff = effs.get((r["model"], r["strategy"], r["world_size"]))
            desc = r.get("model_desc") or MODEL_NAMES[r["model"]]
            lines.append(f"  {desc:32} {r['strategy']:8} {r['world_size']:>5} {shown:>18} "
                         f"{'-' if eff is None else f'{eff:.1%}':>10}")
            if r["status"] != "ok":
                lines.append(f"    error: {r.get('error', '')[:200]}")
    lines += [f"  skipped: {s['what']}: {s['reason']}" for s in tr.get("skipped", [])]
    lines += [f"  {k}: {tr[k]}" for k in ("error",) if tr.get(k)]
    if "goal" in tr:
        g = tr["goal"]
        if g["met"] is None:
            lines.append(f"  goal: {g['goal']}: not measured ({g['why']})")
        else:
            lines.append(f"  goal: {g['goal']}: " + ", ".join(
                f"{s} {g['efficiency'][s]:.1%} ({'met' if m else 'NOT met'})" for s, m in g["met"].items()))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="JSON results, e.g. benchmarks/results/scaling-8gpu.json")
    p.add_argument("--world-sizes", default="1,2,4,8", help="comma list; those above the visible count are skipped")
    p.add_argument("--quick", action="store_true", help="fewer sizes and steps")
    p.add_argument("--cpu", action="store_true", help="gloo on the CPU with tiny models (tests)")
    p.add_argument("--budget-s", type=float, default=540.0,
                   help="wall budget of the whole run: a launch gets at most what is left, none when too little is")
    p.add_argument("--timeout-s", type=float, default=240.0, help="per launch (capped by what is left of the budget)")
    args = p.parse_args(argv)
    try:
        worlds = sorted({int(w) for w in args.world_sizes.split(",") if w.strip()})
    except ValueError:
        p.error(f"--world-sizes {args.world_sizes!r}: give a comma list of whole numbers, e.g. 1,2,4,8")
    if not worlds or worlds[0] < 1:
        p.error(f"--world-sizes {args.world_sizes!r}: give world sizes of at least 1, e.g. 1,2,4,8")
    deadline = time.perf_counter() + args.budget_s
    if args.cpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # every subprocess (collectives included) stays on the CPU
    import torch

    visible = (os.cpu_count() or 1) if args.cpu else (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    runnable = [w for w in worlds if w <= visible]
    kind = "CPU core" if args.cpu else "GPU"
    doc = {"command": [os.path.basename(sys.executable), *sys.argv],
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "host": platform.node(), "torch": torch.__version__, "python": platform.python_version(),
           "device_kind": kind, "visible_devices": visible,
           "gpu": torch.cuda.get_device_name(0) if visible and not args.cpu else None,
           "world_sizes": worlds, "world_sizes_run": runnable, "quick": args.quick, "budget_s": args.budget_s,
           "skipped": [{"what": f"world size {w}", "reason": f"only {visible} {kind}(s) visible"}
                       for w in worlds if w > visible], "parts": {}}
    if not args.cpu and visible == 0:
        doc["skipped"].append({"what": "all parts", "reason": "no CUDA GPU visible (use --cpu for the gloo test path)"})
    full = max(runnable, default=0)
    common = {"quick": args.quick, "cpu": args.cpu, "timeout_s": args.timeout_s, "deadline": deadline,
              "need_s": 15.0 if args.cpu else 45.0}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    parts = (("collectives", lambda: collectives_part(full, **common)),
             ("straggler", lambda: straggler_part(full, **common)),
             ("training", lambda: training_part(runnable, **common)))
    for name, fn in parts if full else ():
        run_part(name, fn, doc)
        write_text_atomic(args.out, json.dumps(doc, indent=2, default=str) + "\n")  # a killed run keeps the parts done
    text = render(doc)
    print("\n" + text, end="")
    write_text_atomic(args.out, json.dumps(doc, indent=2, default=str) + "\n")
    statuses = [part.get("status") for part in doc["parts"].values()]
    return 0 if statuses and all(s in ("ok", "skipped") for s in statuses) else 1


if __name__ == "__main__":
    sys.exit(main())
