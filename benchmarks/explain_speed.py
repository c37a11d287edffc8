"""How fast is ``gpudoctor explain`` on a big log? Bar: a 10 MB log in under 2 s.

    PYTHONPATH=src python benchmarks/explain_speed.py --out benchmarks/results/explain_speed.json

Two 10 MB logs, built here: 8 ranks of NCCL INFO noise, step lines, repeated warnings and progress
bars with a DDP failure at the end (OOM on rank 3, watchdog timeouts elsewhere: the fixture
``tests/fixtures/explain/ddp_oom_rank3_watchdog.log``), and a log full of 'İ', whose lower case is
two characters (such logs once fell back to a per-line, per-trigger scan: 19.5 s for 50 MB). Each
is explained ``--repeat`` times in this process after the catalog is loaded (loading and compiling
it once is not per-log cost): wall and CPU time, best and median, and the load average, since on a
shared machine the wall time grows with the load while the CPU time does not. The answers are
checked too (the unit tests check them on the same logs, without timing them).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEN_MB = 10 * 2**20
FAILURE = ROOT / "tests" / "fixtures" / "explain" / "ddp_oom_rank3_watchdog.log"


def ddp_log() -> str:
    """8 ranks of noise, then the fixture's failure (its '#' citation lines left out)."""
    parts: list[str] = []
    size = step = 0
    while size < TEN_MB:
        rank = step % 8
        for line in (
            f"gpu-node-1:3018451:30240{rank} [{rank}] NCCL INFO Channel {step % 32:02d}/0 : "
            f"{rank}[{rank}] -> {(rank + 1) % 8}[{(rank + 1) % 8}] via P2P/IPC/read",
            f"[rank{rank}]: step {step} loss {1 / (step + 1):.5f} lr 3.0e-4 grad_norm 0.8{step % 97} "
            f"tokens/s {40000 + step % 9000}",
            f"[rank{rank}]:/usr/lib/python3.11/site-packages/torch/utils/checkpoint.py:91: "
            "UserWarning: None of the inputs have requires_grad=True. Gradients will be None",
            f"[rank{rank}]: Epoch 3: {step % 100}%|####      | {step}/100000 [01:23<02:34, 12.3it/s, "
            f"loss=0.{step % 1000}]",
        ):
            parts.append(line)
            size += len(line) + 1
        step += 1
    failure = [line for line in FAILURE.read_text(encoding="utf-8").splitlines() if not line.startswith("#")]
    return "\n".join(parts + failure) + "\n"


def dotted_i_log() -> str:
    """210,000 lines with 'İ' (lower case: 'i' + a combining dot), then an OOM."""
    lines = [f"step {i} loss 2.{i % 97} İstanbul WARNING: retrying İİ" for i in range(210_000)]
    return "\n".join(lines) + "\nRuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from gpudoctor.explain import explain_text, load_catalog

    load_catalog()
    load_before = os.getloadavg()[0]
    logs = {}
    for name, text in (("ddp_8_ranks", ddp_log()), ("dotted_i", dotted_i_log())):
        wall, cpu, ids = [], [], []
        for _ in range(args.repeat):
            start, cpu_start = time.perf_counter(), time.process_time()
            report = explain_text(text)
            wall.append(time.perf_counter() - start)
            cpu.append(time.process_time() - cpu_start)
            ids = [m.entry_id for m in report.matches]
        logs[name] = {"bytes": len(text.encode()), "top": ids[:2],
                      "wall_s": {"best": round(min(wall), 3), "median": round(statistics.median(wall), 3),
                                 "runs": [round(s, 3) for s in wall]},
                      "cpu_s": {"best": round(min(cpu), 3), "median": round(statistics.median(cpu), 3)},
                      "passes_bar": statistics.median(wall) < 2.0}
        print(f"{name}: {len(text) / 2**20:.1f} MB, median {statistics.median(wall):.2f} s wall "
              f"({min(wall):.2f}-{max(wall):.2f}), {statistics.median(cpu):.2f} s CPU; top {ids[:2]}", flush=True)
    result = {"bench": "explain_speed", "bar_s": 2.0, "logs": logs,
              "machine": {"python": platform.python_version(), "platform": platform.platform(),
                          "cpus": os.cpu_count(), "load_avg_1min_at_start": round(load_before, 2)},
              "command": "PYTHONPATH=src python benchmarks/explain_speed.py --out benchmarks/results/explain_speed.json"}
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
