"""What does `gpudoctor run` cost the script it watches? The overhead bars of issue 4.

    PYTHONPATH=src python bench/run_overhead.py --out bench/results/run_overhead.json

One GPU training script (a ResNet-ish conv net on 128x128 images, batch 256, bf16 autocast,
channels_last, cudnn.benchmark, a pinned 4-worker DataLoader over synthetic uint8 images, fused
AdamW) times its own steps with CUDA events recorded after each ``optimizer.step()`` and read
once at the end. It runs plain and under
``gpudoctor run --full`` (so the script itself decides the step count and writes its timings),
interleaved A B B A ..., the same single process each time. Figures per run:

* outside the window: mean step time over steps 5..N-1, leaving out warm-up (0-4) and the
  profiler window (steps 10-14) plus step 15, the first step after the window's closing sync.
  Bar: instrumented <= plain + 2 %.
* whole diagnostic window: the sum of steps 1..N-1 (everything but the first, which holds CUDA
  and cuDNN start-up — and, instrumented, the profiler's one-time CUPTI initialisation), the
  profiler window included. Bar: <= plain + 5 %. The processes' total wall times (start-up,
  gpudoctor's own analysis included) are reported beside it.

The overhead is the ratio of the medians over rounds. Both the CUDA-event (GPU-side step period)
and the host wall-clock figures are reported; the bars are judged on the CUDA-event figures.

So that a reader can tell noise from effect, every round runs each arm once (the order rotates
round by round) and the result carries, per arm, the median, min, max and standard deviation of
each figure over rounds; the paired per-round overheads (instrumented vs the plain run of the
same round) with their min/median/max; the plain arm's own run-to-run spread (the noise floor);
and every run's per-step times. Two diagnostic splits, which do not change the bars:

* ``probes`` arm: ``gpudoctor run --full --no-profile`` — the per-step probes without the
  profiler window (and without its CUPTI start-up), to separate the probes' cost from the
  profiler's after-effects.
* before/after the window: the outside mean split into steps 5-9 and steps 16..N-1.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WINDOW_EXCLUDED = range(10, 16)
WARMUP = 5
BAR_OUTSIDE = 0.02
BAR_WHOLE = 0.05


def worker(steps: int, times_path: Path, batch: int) -> None:
    """The training script: trains ``steps`` optimizer steps, writes per-step times (ms)."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda")

    def block(cin: int, cout: int, stride: int) -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
        )

    model = nn.Sequential(
        block(3, 64, 1), block(64, 128, 2), block(128, 256, 2), block(256, 512, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000),
    ).to(device, memory_format=torch.channels_last)
    # uint8 images, as a real pipeline decodes them: 16 batches, reshuffled each epoch
    data = TensorDataset(torch.randint(0, 256, (batch * 16, 3, 128, 128), dtype=torch.uint8),
                         torch.randint(0, 1000, (batch * 16,)))
    loader = DataLoader(data, batch_size=batch, shuffle=True, num_workers=4, pin_memory=True,
                        persistent_workers=True, prefetch_factor=4, drop_last=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    ends: list[torch.cuda.Event] = []
    walls: list[float] = []
    step = 0
    while step < steps:
        for x, y in loader:
            x = x.to(device, non_blocking=True).to(dtype=torch.float32, memory_format=torch.channels_last)
            x = x.div_(255.0)
            y = y.to(device, non_blocking=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            ends.append(event)
            walls.append(time.perf_counter())
            step += 1
            if step == steps:
                break
    torch.cuda.synchronize()  # sync point: read every step time once, after training
    gpu_ms = [0.0] + [a.elapsed_time(b) for a, b in zip(ends, ends[1:])]
    wall_ms = [0.0] + [(b - a) * 1000.0 for a, b in zip(walls, walls[1:])]
    times_path.write_text(json.dumps({"gpu_ms": gpu_ms, "wall_ms": wall_ms}))


def _figures(times: dict) -> dict:
    out = {}
    for key in ("gpu_ms", "wall_ms"):
        values = times[key]
        outside = [v for i, v in enumerate(values) if i >= WARMUP and i not in WINDOW_EXCLUDED]
        out[f"outside_mean_{key}"] = statistics.fmean(outside)
        out[f"whole_total_{key}"] = sum(values[1:])
        before = [v for i, v in enumerate(values) if WARMUP <= i < WINDOW_EXCLUDED.start]
        after = [v for i, v in enumerate(values) if i >= WINDOW_EXCLUDED.stop]
        out[f"before_window_mean_{key}"] = statistics.fmean(before) if before else None
        out[f"after_window_mean_{key}"] = statistics.fmean(after) if after else None
        out[f"per_step_{key}"] = [round(v, 4) for v in values]
    return out


ARMS = ("plain", "instrumented", "probes")
FIGURES = ("outside_mean", "whole_total", "before_window_mean", "after_window_mean")


def _spread(values: list[float]) -> dict:
    return {
        "median": statistics.median(values), "min": min(values), "max": max(values),
        "stdev": statistics.stdev(values) if len(values) > 1 else 0.0, "n": len(values),
    }


def summarize(runs: list[dict]) -> dict:
    """The overheads, their spread and the noise floor, from every run of every round.

    ``runs`` carry ``mode`` (an arm), ``round`` and the figures of :func:`_figures`. The bar
    figures are unchanged: the ratio of the instrumented arm's median to the plain arm's median.
    """
    def values(mode: str, key: str) -> list[float]:
        return [r[key] for r in runs if r["mode"] == mode and r.get(key) is not None]

    out: dict = {"arms": {}, "overheads": {}}
    for mode in ARMS:
        stats = {f"{fig}_{unit}": _spread(values(mode, f"{fig}_{unit}"))
                 for fig in FIGURES for unit in ("gpu_ms", "wall_ms") if values(mode, f"{fig}_{unit}")}
        if stats:
            out["arms"][mode] = stats
    plain = {r["round"]: r for r in runs if r["mode"] == "plain"}
    for mode in ("instrumented", "probes"):
        if mode not in out["arms"] or "plain" not in out["arms"]:
            continue
        table = {}
        for fig in FIGURES:
            for unit in ("gpu_ms", "wall_ms"):
                key = f"{fig}_{unit}"
                a, b = values("plain", key), values(mode, key)
                if not a or not b:
                    continue
                paired = [r[key] / plain[r["round"]][key] - 1 for r in runs
                          if r["mode"] == mode and r["round"] in plain and r.get(key) and plain[r["round"]].get(key)]
                table[key] = {
                    "ratio_of_medians": statistics.median(b) / statistics.median(a) - 1,
                    "paired_per_round": [round(x, 5) for x in paired],
                    "paired_min": min(paired) if paired else None,
                    "paired_median": statistics.median(paired) if paired else None,
                    "paired_max": max(paired) if paired else None,
                }
        out["overheads"][mode] = table
    if "plain" in out["arms"]:
        noise = {}
        for key, stats in out["arms"]["plain"].items():
            noise[key] = (stats["max"] - stats["min"]) / stats["median"] if stats["median"] else None
        out["noise_floor_plain_range_over_median"] = noise
    return out


def _run(mode: str, steps: int, batch: int, tmp: Path, index: int, round_: int) -> dict:
    times = tmp / f"{mode}-{index}.json"
    script = [sys.executable, str(Path(__file__).resolve()), "--worker", "--steps", str(steps),
              "--batch", str(batch), "--times", str(times)]
    if mode == "plain":
        command = script
    else:
        extra = ["--no-profile"] if mode == "probes" else []
        command = [sys.executable, "-m", "gpudoctor", "run", "--full", *extra, "--json",
                   "--out", str(tmp / f"rd-{index}"), "--", *script]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)
    start = time.monotonic()
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    wall_s = time.monotonic() - start
    if result.returncode != 0 or not times.exists():
        raise RuntimeError(f"{mode} run failed (rc {result.returncode}): {result.stderr[-2000:]}")
    record = {"mode": mode, "round": round_, "command": command, "process_wall_s": wall_s,
              **_figures(json.loads(times.read_text()))}
    if mode != "plain":
        payload = json.loads(result.stdout)
        record["status"] = payload["manifest"]["status"]
        record["findings"] = [f"{f['severity']} {f['code']}: {f['title']}" for f in payload.get("findings") or []]
        record["steps_recorded"] = payload["manifest"]["steps_recorded"]
    return record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--times", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=6,
                        help="rounds; each runs every arm once, in an order that rotates")
    parser.add_argument("--no-probes-arm", action="store_true",
                        help="leave out the diagnostic probes-only arm (--no-profile)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "run_overhead.json")
    args = parser.parse_args()
    if args.worker:
        worker(args.steps, args.times, args.batch)
        return 0
    import torch

    if not torch.cuda.is_available():
        print("run_overhead: needs a CUDA GPU", file=sys.stderr)
        return 2
    arms = ("plain", "instrumented") if args.no_probes_arm else ARMS
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = arms[r % len(arms):] + arms[:r % len(arms)]  # rotate: no arm always first
            if (r // len(arms)) % 2:
                order = order[::-1]  # then the mirror: each arm follows each other arm alike
            for mode in order:
                runs.append(_run(mode, args.steps, args.batch, Path(tmp), len(runs), r))
                print(f"round {r} {mode:13s} outside {runs[-1]['outside_mean_gpu_ms']:.3f} ms/step, "
                      f"whole {runs[-1]['whole_total_gpu_ms']:.1f} ms", flush=True)

    def med(mode: str, key: str) -> float:
        return statistics.median(r[key] for r in runs if r["mode"] == mode)

    result = {
        "command": "PYTHONPATH=src python " + " ".join(
            ["bench/run_overhead.py", *[a for a in sys.argv[1:]]]
        ),
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "steps": args.steps,
        "batch": args.batch,
        "rounds": args.rounds,
        "excluded_from_outside": {"warmup": list(range(WARMUP)), "window": list(WINDOW_EXCLUDED)},
        "arms_run": list(arms),
        "runs": runs,
    }
    for key in ("gpu_ms", "wall_ms"):
        result[f"overhead_outside_{key}"] = med("instrumented", f"outside_mean_{key}") / med("plain", f"outside_mean_{key}") - 1
        result[f"overhead_whole_{key}"] = med("instrumented", f"whole_total_{key}") / med("plain", f"whole_total_{key}") - 1
    # Start-up is in neither figure (step 0 holds CUDA/cuDNN start-up and the profiler's CUPTI
    # initialisation); report what the whole process took in each mode so that cost is visible.
    result["process_wall_s_plain"] = med("plain", "process_wall_s")
    result["process_wall_s_instrumented"] = med("instrumented", "process_wall_s")
    result["statistics"] = summarize(runs)
    result["bars"] = {"outside_window": BAR_OUTSIDE, "whole_window": BAR_WHOLE}
    result["pass_outside"] = result["overhead_outside_gpu_ms"] <= BAR_OUTSIDE
    result["pass_whole"] = result["overhead_whole_gpu_ms"] <= BAR_WHOLE
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"outside the window: {result['overhead_outside_gpu_ms'] * 100:+.2f}% (bar +2%, "
        f"{'pass' if result['pass_outside'] else 'FAIL'}); whole window: "
        f"{result['overhead_whole_gpu_ms'] * 100:+.2f}% (bar +5%, {'pass' if result['pass_whole'] else 'FAIL'}); "
        f"wall clock: {result['overhead_outside_wall_ms'] * 100:+.2f}% / {result['overhead_whole_wall_ms'] * 100:+.2f}%"
    )
    for line in spread_lines(result["statistics"]):
        print(line)
    return 0 if result["pass_outside"] and result["pass_whole"] else 1


def spread_lines(stats: dict) -> list[str]:
    """Plain-text lines of the spread: paired overheads per arm, the noise floor, the split."""
    lines = []
    noise = stats.get("noise_floor_plain_range_over_median", {}).get("outside_mean_gpu_ms")
    if noise is not None:
        lines.append(f"noise floor (plain runs, outside mean, CUDA events): range {noise * 100:.2f}% of median")
    for mode, table in stats.get("overheads", {}).items():
        for key in ("outside_mean_gpu_ms", "before_window_mean_gpu_ms", "after_window_mean_gpu_ms",
                    "whole_total_gpu_ms", "outside_mean_wall_ms"):
            row = table.get(key)
            if row and row["paired_median"] is not None:
                lines.append(
                    f"{mode:12s} {key:26s} ratio of medians {row['ratio_of_medians'] * 100:+.2f}%; paired per round "
                    f"min {row['paired_min'] * 100:+.2f}% median {row['paired_median'] * 100:+.2f}% "
                    f"max {row['paired_max'] * 100:+.2f}% (n={len(row['paired_per_round'])})"
                )
    return lines


if __name__ == "__main__":
    sys.exit(main())
