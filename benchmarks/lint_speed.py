"""How fast is ``gpudoctor lint``? Bar of issue 6: a 10k-line tree in under 2 s.

    PYTHONPATH=src python benchmarks/lint_speed.py --out benchmarks/results/lint_speed.json

The tree is built from the repository's own realistic training scripts and rule fixtures
(``tests/fixtures/lint_real`` and ``tests/fixtures/lint/*``), copied round-robin into a package
layout until it holds at least ``--lines`` lines. Two timings, single process:

1. the whole command, ``python -m gpudoctor lint TREE --format json`` in a fresh interpreter
   (start-up, imports, discovery, reading, parsing, all default rules, rendering): best and median
   of ``--repeat`` runs;
2. the library call ``lint_paths(TREE)`` in this process (median of ``--repeat``), for the share
   that is the linter itself.

Each is reported as wall time and as CPU time (user + system): on a shared machine the wall time
grows with the load average (recorded too) while the CPU time does not.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "tests" / "fixtures" / "lint_real").glob("*.py")) + sorted(
    (ROOT / "tests" / "fixtures" / "lint").glob("GD*/*.py"))


def build_tree(dest: Path, min_lines: int) -> tuple[int, int]:
    """Copy the sources into ``dest/pkgN/module_M.py`` until ``min_lines``; return (files, lines)."""
    files = lines = 0
    while lines < min_lines:
        src = SOURCES[files % len(SOURCES)]
        target = dest / f"pkg{files // 20}" / f"module_{files}_{src.stem.replace('.', '_')}.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, target)
        lines += src.read_text(encoding="utf-8").count("\n")
        files += 1
    return files, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT / "src"))
    from gpudoctor.lint import lint_paths

    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        files, lines = build_tree(tree, args.lines)
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        cli_s, cli_cpu, found = [], [], None
        load_before = os.getloadavg()[0]
        for _ in range(args.repeat):
            start = time.perf_counter()
            usage = resource.getrusage(resource.RUSAGE_CHILDREN)
            proc = subprocess.run([sys.executable, "-m", "gpudoctor", "lint", str(tree), "--format", "json"],
                                  capture_output=True, text=True, env=env)
            cli_s.append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cli_cpu.append(after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime)
            if proc.returncode not in (0, 1):
                raise SystemExit(f"lint failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
            found = len(json.loads(proc.stdout)["violations"])
        lib_s, lib_cpu = [], []
        for _ in range(args.repeat):
            start, cpu = time.perf_counter(), time.process_time()
            report = lint_paths([tree])
            lib_s.append(time.perf_counter() - start)
            lib_cpu.append(time.process_time() - cpu)
    result = {
        "bench": "lint_speed",
        "bar_s": 2.0,
        "tree": {"files": files, "lines": lines, "built_from": [str(p.relative_to(ROOT)) for p in SOURCES]},
        "violations_found": found,
        "files_checked": report.files_checked,
        "cli_wall_s": {"best": round(min(cli_s), 3), "median": round(statistics.median(cli_s), 3),
                       "runs": [round(s, 3) for s in cli_s]},
        "cli_cpu_s": {"best": round(min(cli_cpu), 3), "median": round(statistics.median(cli_cpu), 3)},
        "library_s": {"best": round(min(lib_s), 3), "median": round(statistics.median(lib_s), 3)},
        "library_cpu_s": {"best": round(min(lib_cpu), 3), "median": round(statistics.median(lib_cpu), 3)},
        "lines_per_s_library": round(lines / statistics.median(lib_s)),
        "passes_bar": statistics.median(cli_s) < 2.0,
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "cpus": os.cpu_count(), "load_avg_1min_at_start": round(load_before, 2)},
        "command": "PYTHONPATH=src python benchmarks/lint_speed.py --out benchmarks/results/lint_speed.json",
    }
    text = json.dumps(result, indent=2) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    print(text, end="")


if __name__ == "__main__":
    main()
