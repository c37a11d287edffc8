"""What does `gpudoctor run` cost the script it watches? The overhead bars of issue 4.

    PYTHONPATH=src python benchmarks/run_overhead.py --out benchmarks/results/run_overhead.json

One GPU training script (a ResNet-ish conv net on 128x128 images, batch 256, bf16 autocast,
channels_last, cudnn.benchmark, a pinned 4-worker DataLoader over 16 batches of synthetic uint8
images — a new epoch every 16 steps —, fused AdamW) times its own steps with CUDA events recorded
after each ``optimizer.step()`` and read once at the end. It runs 60 steps plain and under
``gpudoctor run --full`` (so that the script itself ends and writes its timings) in these arms,
interleaved, every round running each arm once in a rotating order:

* ``instrumented`` — the bars. The layout of the default ``gpudoctor run --steps 60``: the
  profiler window takes the last five steps (55-59; ``--window 55:59`` reproduces it under
  ``--full``), so no step follows the window's closing sync.
* ``instrumented_noflops`` — the same with ``GPUDOCTOR_WINDOW_FLOPS=0``: no input shapes
  recorded, no FLOP count (what counting FLOPs for MFU costs at the window's stop).
* ``full_layout`` — ``gpudoctor run --full``: the end is unknown, so the window takes steps
  10-14 and 50 steps follow it. Reported beside the bars, not judged by them.
* ``probes`` — ``--full --no-profile``: the per-step probes alone, no window.

Figures per run (each arm's steps left out: warm-up 0-4, its window, and the step after it):

* outside the window: mean step time over the steps not left out. Bar: instrumented <= plain + 2 %.
* whole diagnostic window: the sum of steps 1..59 (step 0 holds CUDA/cuDNN start-up and,
  instrumented, the profiler's one-time CUPTI start-up), the window included. Bar: <= plain + 5 %.
  The processes' total wall times (start-up, gpudoctor's own analysis) are reported beside it.
* before / after the window: the outside mean split at the window (where steps exist).

Every comparison uses the same steps of the plain runs (the plain figure is recomputed with the
arm's layout). The overhead is the ratio of the medians over rounds; the JSON also carries, per
arm, median/min/max/stdev over rounds, the paired per-round overheads, the plain arm's own
run-to-run range (the noise floor) and every run's per-step times. The bars are judged on the
CUDA-event (GPU-side step period) figures; the host wall-clock figures are reported beside them.
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
sys.path.insert(0, str(ROOT / "src"))

from gpudoctor.collectors.launch import FULL_WINDOW, RunSpec  # noqa: E402
from gpudoctor.records.atomic import write_text_atomic  # noqa: E402

WARMUP = 5
BAR_OUTSIDE = 0.02
BAR_WHOLE = 0.05
BAR_ARM = "instrumented"
ARMS = ("plain", "instrumented", "instrumented_noflops", "full_layout", "probes")
FIGURES = ("outside_mean", "whole_total", "before_window_mean", "after_window_mean")


def default_window(steps: int) -> tuple[int, int]:
    """Where ``gpudoctor run --steps N`` puts the window (the product's own rule)."""
    window = RunSpec(command=("python",), run_dir=Path("."), steps=steps).window
    assert window is not None, f"--steps {steps} leaves no room for a window"
    return window


def arm_window(mode: str, steps: int) -> tuple[int, int] | None:
    """The profiler window of an arm (``None``: no window)."""
    if mode in ("instrumented", "instrumented_noflops"):
        return default_window(steps)
    return FULL_WINDOW if mode == "full_layout" else None


def arm_flags(mode: str, steps: int) -> list[str]:
    if mode in ("instrumented", "instrumented_noflops"):
        first, last = default_window(steps)
        return ["--full", "--window", f"{first}:{last}"]
    return {"full_layout": ["--full"], "probes": ["--full", "--no-profile"]}[mode]


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


def _left_out(window: tuple[int, int] | None) -> set[int]:
    """Steps kept out of the outside mean: warm-up, the window and the step right after it."""
    out = set(range(WARMUP))
    if window is not None:
        out |= set(range(window[0], window[1] + 2))
    return out


def figures(times: dict, window: tuple[int, int] | None) -> dict:
    """A run's figures (ms) for a window layout; ``times`` holds per-step ``gpu_ms``/``wall_ms``."""
    out = {}
    left_out = _left_out(window)
    for key in ("gpu_ms", "wall_ms"):
        values = times[key]
        outside = [v for i, v in enumerate(values) if i not in left_out]
        out[f"outside_mean_{key}"] = statistics.fmean(outside)
        out[f"whole_total_{key}"] = sum(values[1:])
        before = after = []
        if window is not None:
            before = [v for i, v in enumerate(values) if WARMUP <= i < window[0]]
            after = [v for i, v in enumerate(values) if i > window[1] + 1]
        out[f"before_window_mean_{key}"] = statistics.fmean(before) if before else None
        out[f"after_window_mean_{key}"] = statistics.fmean(after) if after else None
    return out


def _spread(values: list[float]) -> dict:
    return {
        "median": statistics.median(values), "min": min(values), "max": max(values),
        "stdev": statistics.stdev(values) if len(values) > 1 else 0.0, "n": len(values),
    }


def summarize(runs: list[dict], steps: int) -> dict:
    """The overheads, their spread and the noise floor, from every run of every round.

    ``runs`` carry ``mode`` (an arm), ``round`` and ``per_step_gpu_ms``/``per_step_wall_ms``.
    Each arm is compared with the plain runs over the same steps (the arm's layout).
    """
    def per_step(run: dict) -> dict:
        return {"gpu_ms": run["per_step_gpu_ms"], "wall_ms": run["per_step_wall_ms"]}

    plain_runs = {r["round"]: r for r in runs if r["mode"] == "plain"}
    out: dict = {"arms": {}, "overheads": {}, "layouts": {}}
    for mode in ARMS:
        mine = [r for r in runs if r["mode"] == mode]
        if not mine:
            continue
        window = arm_window(mode, steps)
        out["layouts"][mode] = {"window": list(window) if window else None,
                                "left_out_of_outside": sorted(_left_out(window))}
        figs = {r["round"]: figures(per_step(r), window) for r in mine}
        out["arms"][mode] = {key: _spread([f[key] for f in figs.values()])
                             for key in next(iter(figs.values())) if all(f[key] is not None for f in figs.values())}
        if mode == "plain" or not plain_runs:
            continue
        base = {rnd: figures(per_step(r), window) for rnd, r in plain_runs.items()}
        table = {}
        for key in out["arms"][mode]:
            paired = [figs[rnd][key] / base[rnd][key] - 1 for rnd in figs if rnd in base and base[rnd][key]]
            table[key] = {
                "plain_median": statistics.median(b[key] for b in base.values()),
                "ratio_of_medians": out["arms"][mode][key]["median"] / statistics.median(b[key] for b in base.values()) - 1,
                "paired_per_round": [round(x, 5) for x in paired],
                "paired_min": min(paired) if paired else None,
                "paired_median": statistics.median(paired) if paired else None,
                "paired_max": max(paired) if paired else None,
            }
        out["overheads"][mode] = table
    if "plain" in out["arms"]:
        out["noise_floor_plain_range_over_median"] = {
            key: (st["max"] - st["min"]) / st["median"] if st["median"] else None
            for key, st in out["arms"]["plain"].items()
        }
    return out


def _run(mode: str, steps: int, batch: int, tmp: Path, index: int, round_: int) -> dict:
    times = tmp / f"{mode}-{index}.json"
    script = [sys.executable, str(Path(__file__).resolve()), "--worker", "--steps", str(steps),
              "--batch", str(batch), "--times", str(times)]
    if mode == "plain":
        command = script
    else:
        command = [sys.executable, "-m", "gpudoctor", "run", *arm_flags(mode, steps), "--json", "--fail-on", "never",
                   "--out", str(tmp / f"rd-{index}"), "--", *script]
    env = dict(os.environ)
    if mode == "instrumented_noflops":
        env["GPUDOCTOR_WINDOW_FLOPS"] = "0"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)
    start = time.monotonic()
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    wall_s = time.monotonic() - start
    if result.returncode != 0 or not times.exists():
        raise RuntimeError(f"{mode} run failed (rc {result.returncode}): {result.stderr[-2000:]}")
    measured = json.loads(times.read_text())
    record = {"mode": mode, "round": round_, "command": command, "process_wall_s": wall_s,
              **{f"per_step_{k}": [round(v, 4) for v in measured[k]] for k in ("gpu_ms", "wall_ms")}}
    if mode != "plain":
        payload = json.loads(result.stdout)
        record["profile_window"] = payload["manifest"]["profile_window"]
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
    parser.add_argument("--rounds", type=int, default=4,
                        help="rounds; each runs every arm once, in an order that rotates")
    parser.add_argument("--arms", default=",".join(ARMS),
                        help=f"comma-separated arms to run (plain and {BAR_ARM} always run): {','.join(ARMS)}")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "run_overhead.json")
    args = parser.parse_args()
    if args.worker:
        worker(args.steps, args.times, args.batch)
        return 0
    import torch

    if not torch.cuda.is_available():
        print("run_overhead: needs a CUDA GPU", file=sys.stderr)
        return 2
    chosen = {a.strip() for a in args.arms.split(",") if a.strip()} | {"plain", BAR_ARM}
    unknown = chosen - set(ARMS)
    if unknown:
        parser.error(f"unknown arm(s) {sorted(unknown)}; choose from {','.join(ARMS)}")
    arms = tuple(a for a in ARMS if a in chosen)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = arms[r % len(arms):] + arms[:r % len(arms)]  # rotate: no arm always first
            if (r // len(arms)) % 2:
                order = order[::-1]  # then the mirror: each arm follows each other arm alike
            for mode in order:
                runs.append(_run(mode, args.steps, args.batch, Path(tmp), len(runs), r))
                fig = figures({"gpu_ms": runs[-1]["per_step_gpu_ms"], "wall_ms": runs[-1]["per_step_wall_ms"]},
                              arm_window(mode, args.steps))
                print(f"round {r} {mode:13s} outside {fig['outside_mean_gpu_ms']:.3f} ms/step, "
                      f"whole {fig['whole_total_gpu_ms']:.1f} ms", flush=True)

    stats = summarize(runs, args.steps)
    bar = stats["overheads"][BAR_ARM]
    result = {
        "command": "PYTHONPATH=src python " + " ".join(["benchmarks/run_overhead.py", *sys.argv[1:]]),
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "steps": args.steps,
        "batch": args.batch,
        "rounds": args.rounds,
        "arms_run": list(arms),
        "bar_arm": BAR_ARM,
        "layouts": stats["layouts"],
        "overhead_outside_gpu_ms": bar["outside_mean_gpu_ms"]["ratio_of_medians"],
        "overhead_whole_gpu_ms": bar["whole_total_gpu_ms"]["ratio_of_medians"],
        "overhead_outside_wall_ms": bar["outside_mean_wall_ms"]["ratio_of_medians"],
        "overhead_whole_wall_ms": bar["whole_total_wall_ms"]["ratio_of_medians"],
        # start-up is in neither figure: what the whole process took in each mode makes it visible
        "process_wall_s": {m: statistics.median(r["process_wall_s"] for r in runs if r["mode"] == m) for m in arms},
        "statistics": stats,
        "bars": {"outside_window": BAR_OUTSIDE, "whole_window": BAR_WHOLE},
        "runs": runs,
    }
    result["pass_outside"] = result["overhead_outside_gpu_ms"] <= BAR_OUTSIDE
    result["pass_whole"] = result["overhead_whole_gpu_ms"] <= BAR_WHOLE
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, json.dumps(result, indent=2) + "\n")
    print(verdict_line(result))
    for line in spread_lines(stats):
        print(line)
    return 0 if result["pass_outside"] and result["pass_whole"] else 1


def verdict_line(result: dict) -> str:
    return (
        f"outside the window: {result['overhead_outside_gpu_ms'] * 100:+.2f}% (bar +2%, "
        f"{'pass' if result['pass_outside'] else 'FAIL'}); whole window: "
        f"{result['overhead_whole_gpu_ms'] * 100:+.2f}% (bar +5%, {'pass' if result['pass_whole'] else 'FAIL'}); "
        f"wall clock: {result['overhead_outside_wall_ms'] * 100:+.2f}% / {result['overhead_whole_wall_ms'] * 100:+.2f}%"
    )


def spread_lines(stats: dict) -> list[str]:
    """Plain-text lines of the spread: paired overheads per arm, the noise floor, the split."""
    lines = []
    noise = stats.get("noise_floor_plain_range_over_median", {}).get("outside_mean_gpu_ms")
    if noise is not None:
        lines.append(f"noise floor (plain runs, outside mean, CUDA events): range {noise * 100:.2f}% of median")
    for mode, table in stats.get("overheads", {}).items():
        window = stats.get("layouts", {}).get(mode, {}).get("window")
        where = f"window {window[0]}-{window[1]}" if window else "no window"
        for key in ("outside_mean_gpu_ms", "before_window_mean_gpu_ms", "after_window_mean_gpu_ms",
                    "whole_total_gpu_ms", "outside_mean_wall_ms"):
            row = table.get(key)
            if row and row["paired_median"] is not None:
                lines.append(
                    f"{mode:12s} ({where}) {key:26s} ratio of medians {row['ratio_of_medians'] * 100:+.2f}%; "
                    f"paired per round min {row['paired_min'] * 100:+.2f}% median {row['paired_median'] * 100:+.2f}% "
                    f"max {row['paired_max'] * 100:+.2f}% (n={len(row['paired_per_round'])})"
                )
    return lines


if __name__ == "__main__":
    sys.exit(main())
