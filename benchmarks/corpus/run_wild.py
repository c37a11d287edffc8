"""Does ``gpudoctor run`` hold on public training scripts? CPU only, no diagnosis.

Each script (``wild_scripts.SCRIPTS``: repository @ commit, files, command, synthetic data) is
extracted from its fetched mirror to ``--work`` (outside the repository; never committed) and
run three times from fresh copies, each with stdout and stderr merged:

* ``plain``: the command as its README gives it (timed: the overhead's reference);
* ``count``: the same with a ``sitecustomize`` of this harness's own on ``PYTHONPATH`` that
  registers a global optimizer step post-hook and appends one line per ``optimizer.step()``
  (optimizer id) to ``count-<pid>.txt`` -- the independent count; the user's file is untouched;
* ``gd``: ``gpudoctor run --full --json --fail-on never -- CMD`` (``--full``: the script runs to
  its own end, so its exit code, output and step count compare with ``plain``; ``--steps N``
  would stop it early by design). Optionally ``gdN``: ``--steps N`` for scripts with more steps,
  which must stop at exactly N with exit 0.

Checks per script (each ``ok``/``FAIL``/``n/a`` with one line why): exit code equal to plain's
(``no_steps`` exits 1 by design: judged against that rule); steps recorded per probed process =
optimizer steps of that process's first-stepping optimizer (counted independently); loss
recorded where ``backward`` ran; data wait plausible (never negative, never above the step);
stdout equal to plain's as a multiset of lines with numbers masked (gpudoctor's known profiler
noise lines dropped); no process carrying the run's tag left 2 s after it ends; wall overhead.

    PYTHONPATH=src python benchmarks/corpus/run_wild.py --out benchmarks/results/run_wild-cpu.md
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from wild_scripts import MIRRORS, SCRIPTS, WildScript  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
SRC = Path(os.environ.get("RUNWILD_SRC", REPO_ROOT / "src"))  # another checkout's src: a BEFORE table

COUNTER = '''\
import os
_dir = os.environ.get("RUNWILD_COUNT_DIR")
if _dir:
    import torch.optim.optimizer as _o

    def _count(opt, args, kwargs):
        fd = os.open(os.path.join(_dir, "count-%d.txt" % os.getpid()),
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(fd, ("%s:%d\\n" % (type(opt).__name__, id(opt))).encode())
        os.close(fd)

    _o.register_optimizer_step_post_hook(_count)
'''

NUMBER = re.compile(rb"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def extract(script: WildScript, work: Path) -> Path:
    """The script's files from its mirror's HEAD into ``work/src/<name>``."""
    dest = work / "src" / script.name
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    git_dir = MIRRORS / script.repo.replace("/", "+") / "repo"
    archive = subprocess.run(["git", "--git-dir", str(git_dir), "archive", script.commit, *script.paths],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def tagged_pids(tag: str) -> list[int]:
    needle = f"RUNWILD_TAG={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def run_variant(script: WildScript, src: Path, work: Path, variant: str, *, steps: int | None,
                timeout_s: float) -> dict:
    base = work / variant / script.name
    if base.exists():
        shutil.rmtree(base)
    shutil.copytree(src, base, symlinks=True)
    cwd = base / script.cwd
    script.prepare(cwd)
    env = dict(os.environ)
    paths = [str(SRC), *[str(cwd / p) for p in script.pythonpath], *script.extra_paths]
    tag = uuid.uuid4().hex
    env.update({"RUNWILD_TAG": tag, "PYTHONUNBUFFERED": "1", "COLUMNS": "120", **script.env})
    count_dir = work / variant / f"{script.name}.count"
    if variant == "count":
        shim = work / "counter"
        shim.mkdir(parents=True, exist_ok=True)
        (shim / "sitecustomize.py").write_text(COUNTER)
        paths.insert(0, str(shim))
        if count_dir.exists():
            shutil.rmtree(count_dir)
        count_dir.mkdir(parents=True)
        env["RUNWILD_COUNT_DIR"] = str(count_dir)
    env["PYTHONPATH"] = os.pathsep.join(paths)
    cmd = [sys.executable if a == "PYTHON" else a for a in script.cmd]
    run_dir = work / variant / f"{script.name}.run"
    if variant.startswith("gd"):
        if run_dir.exists():
            shutil.rmtree(run_dir)
        how = ["--steps", str(steps)] if steps else ["--full"]
        cmd = [sys.executable, "-m", "gpudoctor", "run", *how, "--out", str(run_dir), "--json",
               "--fail-on", "never", "--", *cmd]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
    wall = time.perf_counter() - t0
    time.sleep(2.0)
    left = tagged_pids(tag)
    for pid in left:  # our own tagged processes only
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    row = {"rc": proc.returncode, "wall_s": round(wall, 2), "timed_out": timed_out, "left": left,
           "cmd": cmd}
    here = str(work / variant).encode()  # the variant's folder shows in tracebacks and warnings
    out, err = out.replace(here, b"<work>"), err.replace(here, b"<work>")
    if variant.startswith("gd"):
        row["gd_stdout"] = out.decode(errors="replace")
        row["console_tail"] = err.decode(errors="replace").splitlines()[-15:]
        log = run_dir / "stdout.log"
        row["output"] = log.read_bytes().replace(here, b"<work>") if log.is_file() else b""
        row.update(read_run(run_dir))
    else:
        row["output"] = out + err
    if variant == "count":
        row["counts"] = read_counts(count_dir)
    return row


def read_counts(count_dir: Path) -> dict:
    """Per pid: optimizer steps of each optimizer, in the order they first stepped."""
    result = {}
    for f in sorted(count_dir.glob("count-*.txt")):
        order: dict[str, int] = {}
        for line in f.read_text().splitlines():
            order[line] = order.get(line, 0) + 1
        result[f.stem.split("-")[1]] = list(order.items())
    return result


def read_run(run_dir: Path) -> dict:
    info: dict = {"manifest": None, "ranks": {}}
    manifest = run_dir / "manifest.json"
    if manifest.is_file():
        m = json.loads(manifest.read_text())
        m = m.get("data", m)
        info["manifest"] = {k: m.get(k) for k in ("status", "exit_code", "steps_recorded", "notes",
                                                  "error", "ranks")}
    for f in sorted(run_dir.glob("steps-rank*.jsonl")):
        last: dict[int, dict] = {}
        for line in f.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            rec = rec.get("data", rec)
            if "step" in rec:
                last[rec["step"]] = rec
        recs = [last[k] for k in sorted(last)]
        info["ranks"][f.stem.split("rank")[1]] = {
            "steps": len(recs),
            "loss": sum(r.get("loss") is not None for r in recs),
            "bad_wait": sum((r.get("data_wait_ms") or 0) < 0
                            or (r.get("data_wait_ms") or 0) > (r.get("step_ms") or 0) + 1e-6 for r in recs),
            "wait_share": round(sum(r.get("data_wait_ms") or 0 for r in recs)
                                / max(1e-9, sum(r.get("step_ms") or 0 for r in recs)), 3),
            "micro": sorted({r.get("micro_steps") for r in recs}, key=str),
        }
    return info


def masked_lines(data: bytes, drop_noise: bool) -> collections.Counter:
    from gpudoctor.collectors.watch import is_noise

    lines = collections.Counter()
    for raw in data.replace(b"\r", b"\n").split(b"\n"):
        if not raw.strip() or (drop_noise and is_noise(raw)):
            continue
        lines[NUMBER.sub(b"#", raw.strip())] += 1
    return lines


def judge(script: WildScript, plain: dict, count: dict, gd: dict, gdn: dict | None) -> dict:
    checks: dict[str, tuple[str, str]] = {}
    status = (gd.get("manifest") or {}).get("status")
    steps_total = sum(n for per in count["counts"].values() for _, n in per[:1])
    want_rc = plain["rc"]
    if status == "no_steps" and plain["rc"] == 0:
        want_rc = 1
    checks["exit"] = (("ok" if gd["rc"] == want_rc else "FAIL"),
                      f"plain {plain['rc']}, gd {gd['rc']} (status {status})")
    expected = sorted(per[0][1] for per in count["counts"].values() if per)
    recorded = sorted(r["steps"] for r in gd["ranks"].values())
    checks["steps"] = (("ok" if expected == recorded else "FAIL"),
                       f"counted {expected} (first optimizer per process), recorded {recorded}")
    losses = [r["loss"] for r in gd["ranks"].values()]
    if not recorded or not sum(recorded):
        checks["loss"] = ("n/a", "no steps recorded")
    else:
        full = all(r["loss"] >= r["steps"] - 1 for r in gd["ranks"].values())
        checks["loss"] = (("ok" if full else "FAIL"), f"loss on {losses} of {recorded} steps")
    if not recorded:
        checks["data_wait"] = ("n/a", "no steps recorded")
    else:
        bad = sum(r["bad_wait"] for r in gd["ranks"].values())
        shares = [r["wait_share"] for r in gd["ranks"].values()]
        checks["data_wait"] = (("ok" if not bad else "FAIL"),
                               f"share of step time {shares}; {bad} steps outside [0, step]")
    a = masked_lines(plain["output"], False)
    b = masked_lines(gd["output"], True)
    only_plain, only_gd = a - b, b - a
    why = f"{sum(only_plain.values())} lines only plain, {sum(only_gd.values())} only gd"
    sample = list(only_plain)[:1] + list(only_gd)[:1]
    if sample:
        why += ": " + " | ".join(s.decode(errors="replace")[:90] for s in sample)
    checks["stdout"] = (("ok" if not only_plain and not only_gd else "FAIL"), why)
    left = plain["left"] + gd["left"] + (gdn["left"] if gdn else [])
    checks["children"] = (("ok" if not gd["left"] and not (gdn and gdn["left"]) else "FAIL"),
                          f"left after gd: {len(gd['left'])}"
                          + (f", after gd --steps: {len(gdn['left'])}" if gdn else "")
                          + f", after plain: {len(plain['left'])}")
    if gdn is not None:
        st = (gdn.get("manifest") or {}).get("status")
        rec = sorted(r["steps"] for r in gdn["ranks"].values())
        good = gdn["rc"] == 0 and st == "stopped" and rec and all(n == script.steps for n in rec)
        checks["stop_at_N"] = (("ok" if good else "FAIL"),
                               f"--steps {script.steps}: rc {gdn['rc']}, status {st}, recorded {rec}")
    else:
        checks["stop_at_N"] = ("n/a", "too few steps for a --steps run" if script.steps is None else "")
    overhead = gd["wall_s"] - plain["wall_s"]
    return {"checks": {k: {"verdict": v, "why": w} for k, (v, w) in checks.items()},
            "overhead_s": round(overhead, 1), "optimizer_steps": steps_total, "left": left}


def table(rows: list[dict]) -> str:
    keys = ["exit", "steps", "loss", "data_wait", "stdout", "children", "stop_at_N"]
    out = ["| script | loop shape | " + " | ".join(keys) + " | plain s | gd s |",
           "|" + "---|" * (len(keys) + 4)]
    for r in rows:
        cells = [r["checks"][k]["verdict"] for k in keys]
        out.append(f"| `{r['name']}` | {r['shape']} | " + " | ".join(cells)
                   + f" | {r['plain_s']} | {r['gd_s']} |")
    tally = collections.Counter(r["checks"][k]["verdict"] for r in rows for k in keys)
    out += ["", f"Tally: {tally['ok']} ok, {tally['FAIL']} FAIL, {tally['n/a']} n/a "
                f"over {len(rows)} scripts x {len(keys)} checks.", "", "Why, per script:", ""]
    for r in rows:
        out.append(f"* `{r['name']}` ({r['source']}; `{' '.join(r['cmd'])}`):")
        for k in keys:
            c = r["checks"][k]
            out.append(f"  * {k} **{c['verdict']}**: {c['why']}")
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/runwild-work"))
    parser.add_argument("--out", type=Path, required=True, help="the .md table (the .json beside it)")
    parser.add_argument("--only", default="", help="comma-separated script names")
    parser.add_argument("--title", default="gpudoctor run on public training scripts (CPU)")
    parser.add_argument("--note", default="", help="a paragraph under the title (how the rows were made)")
    parser.add_argument("--merge", type=Path, nargs="*", default=[],
                        help="tables' .json to render together (later files replace a script's row)")
    args = parser.parse_args()
    if args.merge:
        merged: dict[str, dict] = {}
        for f in args.merge:
            merged.update((r["name"], r) for r in json.loads(f.read_text()))
        order = [s.name for s in SCRIPTS]
        write(args, sorted(merged.values(), key=lambda r: order.index(r["name"])))
        return 0
    only = {s for s in args.only.split(",") if s}
    rows = []
    for script in SCRIPTS:
        if only and script.name not in only:
            continue
        src = extract(script, args.work)
        res = {v: run_variant(script, src, args.work, v, steps=None, timeout_s=script.timeout_s)
               for v in ("plain", "count", "gd")}
        gdn = None
        if script.steps:
            gdn = run_variant(script, src, args.work, "gdN", steps=script.steps, timeout_s=script.timeout_s)
        verdict = judge(script, res["plain"], res["count"], res["gd"], gdn)
        row = {"name": script.name, "shape": script.shape,
               "source": f"{script.repo}@{script.commit[:12]} {', '.join(script.paths)}",
               "cmd": script.cmd, "plain_s": res["plain"]["wall_s"], "gd_s": res["gd"]["wall_s"],
               **verdict, "plain_rc": res["plain"]["rc"], "counts": res["count"]["counts"],
               "gd": {k: v for k, v in res["gd"].items() if k not in ("output",)},
               "gdN": ({k: v for k, v in gdn.items() if k != "output"} if gdn else None)}
        rows.append(row)
        fails = [k for k, c in row["checks"].items() if c["verdict"] == "FAIL"]
        print(f"{script.name}: {'FAIL ' + ','.join(fails) if fails else 'all ok'} "
              f"(plain {row['plain_s']} s, gd {row['gd_s']} s)", flush=True)
        write(args, rows)
    return 0


def write(args: argparse.Namespace, rows: list[dict]) -> None:
    """The table so far (rewritten after each script, so an interrupted run keeps its rows)."""
    head = (f"# {args.title}\n\nCommand: `PYTHONPATH=src python benchmarks/corpus/run_wild.py "
            f"{' '.join(sys.argv[1:])}` (2-core CPU, torch "
            f"{__import__('torch').__version__}, no GPU). How each check is judged: the harness's "
            f"docstring.\n\n")
    args.out.write_text(head + (args.note + "\n\n" if args.note else "") + table(rows))
    args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1, default=str) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
