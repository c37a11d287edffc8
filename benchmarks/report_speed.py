"""HTML report speed and size for a 10-minute run sampled at 10 Hz (issue 8 bar: <= 2 s, <= 5 MB).

Builds the run directory from records (6,000 GPU samples per GPU, one step every 0.4 s per rank),
then times ``write_report`` three times and reports the median.

    PYTHONPATH=src python benchmarks/report_speed.py --gpus 1 --out benchmarks/results/report_speed.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from run_factory import make_findings, make_run  # noqa: E402  (the tests' run-directory builder)

from gpudoctor.records.rundir import load_run  # noqa: E402
from gpudoctor.report.html import write_report  # noqa: E402
from gpudoctor.records.atomic import write_text_atomic  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1, help="GPUs (= ranks) in the synthetic run")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    seconds, hz = 600, 10
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = make_run(Path(tmp) / "run", seconds=seconds, hz=hz, ranks=args.gpus,
                           steps=math.ceil(seconds / 0.4))
        run = load_run(run_dir)
        times, size = [], 0
        for _ in range(3):
            start = time.perf_counter()
            path = write_report(run, make_findings())
            times.append(time.perf_counter() - start)
            size = path.stat().st_size
    result = {
        "command": f"PYTHONPATH=src python benchmarks/report_speed.py --gpus {args.gpus} --out {args.out}",
        "run": {"seconds": seconds, "hz": hz, "gpus": args.gpus, "gpu_samples": seconds * hz * args.gpus,
                "steps_per_rank": math.ceil(seconds / 0.4)},
        "write_report_s": {"median": statistics.median(times), "all": times},
        "html_bytes": size,
        "bars": {"seconds": 2.0, "bytes": 5 * 1024 * 1024},
        "pass": statistics.median(times) <= 2.0 and size <= 5 * 1024 * 1024,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, json.dumps(result, indent=2) + "\n")
    print(f"report for a {seconds // 60}-minute run at {hz} Hz on {args.gpus} GPU(s): "
          f"median {result['write_report_s']['median']:.2f} s, {size / 1e6:.2f} MB "
          f"({'pass' if result['pass'] else 'FAIL'})")
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
