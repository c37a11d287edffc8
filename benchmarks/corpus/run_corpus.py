"""Corpus verdicts (device call 1): ``gpudoctor run --steps 60`` on each public script, unmodified.

For every script of ``manifest.SCRIPTS``: copy the carried corpus to a work tree, write the
synthetic data (``make_data.py``), run ``python3 -m gpudoctor run --steps 60 --out RUN --json --
python3 SCRIPT ARGS`` from the script's own folder with a per-script timeout, then read the run
directory (``figures.read_run``): the verdict (top WARN/ERROR finding: code, title, expected
gain), the step figures of ``run_stats`` (median and mean step, throughput), the breakdown
shares and GPU busy share, the window's top kernels, status and wall time.

Writes to OUT: ``corpus-verdicts.json``, ``corpus-verdicts.md`` (a table), ``runs/<name>/``
(the record files, no traces, stdout tail), ``logs/<name>.log`` (the console) and
``consoles/<name>.txt`` (the terminal summary as ``gpudoctor diagnose`` prints it).

    PYTHONPATH=src python3 benchmarks/corpus/run_corpus.py --out OUT [--only a,b] [--steps 60]
    PYTHONPATH=src python3 benchmarks/corpus/run_corpus.py --out /tmp/c --cpu --steps 8   # CPU check
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
from figures import console_text, read_run  # noqa: E402
from manifest import SCRIPTS, Script, select  # noqa: E402
from tables import verdicts_markdown  # noqa: E402


def run_one(script: Script, work: Path, out: Path, *, steps: int, cpu: bool, timeout_scale: float) -> dict:
    cwd = harness.make_variant(work, script, "verdict")
    run_dir = work / "runs" / script.name
    log = out / "logs" / f"{script.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"--- {script.name}: {' '.join(script.cpu_args if cpu else script.args)}", flush=True)
    row = {"name": script.name, "repo": script.repo,
           "script": f"{script.cwd}/{script.script}", "args": list(script.cpu_args if cpu else script.args),
           "why": script.why}
    row.update(harness.gpudoctor_run(script, cwd, run_dir, steps=steps, cpu=cpu,
                                     timeout_s=script.timeout_s * timeout_scale, log=log))
    payload = harness.json_payload(log)
    row["json_exit_code"] = payload.get("exit_code") if payload else None
    row.update(read_run(run_dir))
    row["packed_bytes"] = harness.pack(run_dir, out / "runs" / script.name)
    try:
        from gpudoctor.records.rundir import load_run

        text = console_text(load_run(run_dir))
        (out / "consoles").mkdir(exist_ok=True)
        (out / "consoles" / f"{script.name}.txt").write_text(text)
    except Exception as exc:  # noqa: BLE001 - the table does not depend on the rendering
        row["error_console"] = f"{type(exc).__name__}: {exc}"
    v = row["verdict"] if "verdict" in row else {}
    print(f"    {row['wall_s']:.1f} s rc={row['rc']} status={row.get('status')} "
          f"top={v.get('code')} gain={v.get('expected_gain')} "
          f"throughput={row.get('throughput')} {row.get('unit') or ''}", flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="results folder (the device call's $OUT)")
    parser.add_argument("--corpus", type=Path, default=harness.DEFAULT_CORPUS, help="the carried .corpus folder")
    parser.add_argument("--work", type=Path, default=Path("/tmp/gpudoctor-corpus-work"),
                        help="scratch work tree (deleted and rebuilt)")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--only", default="", help="comma-separated script names")
    parser.add_argument("--cpu", action="store_true", help="tiny arguments (the CPU check of the harness)")
    parser.add_argument("--scale", type=float, default=None, help="data size scale (default 1, --cpu 0.1)")
    parser.add_argument("--timeout-scale", type=float, default=1.0, help="multiply every per-script timeout")
    args = parser.parse_args()
    scripts = [s for s in select(args.only) if s.cpu_ok or not args.cpu]
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    scale = args.scale if args.scale is not None else (0.1 if args.cpu else 1.0)
    prep = harness.prepare_work(args.corpus, args.work, scale=scale)
    print(f"work tree {args.work} ready in {time.perf_counter() - t0:.1f} s (data: {prep['data_seconds']})",
          flush=True)
    rows = [run_one(s, args.work, args.out, steps=args.steps, cpu=args.cpu,
                    timeout_scale=args.timeout_scale) for s in scripts]
    skipped = [s.name for s in select(args.only) if s not in scripts]
    doc = {
        "what": "gpudoctor run --steps N on public training scripts, unmodified (benchmarks/corpus)",
        "steps": args.steps, "cpu_check": args.cpu, "gpu": harness.gpu_name(), "host": platform.node(),
        "python": platform.python_version(), "torch": harness.version_of("torch"),
        "torchvision": harness.version_of("torchvision"), "sources": prep["sources"],
        "data_seconds": prep["data_seconds"], "total_wall_s": round(time.perf_counter() - t0, 1),
        "skipped": skipped, "scripts_known": [s.name for s in SCRIPTS], "rows": rows,
    }
    (args.out / "corpus-verdicts.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    (args.out / "corpus-verdicts.md").write_text(verdicts_markdown(doc))
    print((args.out / "corpus-verdicts.md").read_text())
    return 0 if all(r.get("status") in ("stopped", "completed") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
