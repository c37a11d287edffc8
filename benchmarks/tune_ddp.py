"""`gpudoctor tune ddp` on 2 GPUs: does it pick the faster of with/without a compression hook?

    PYTHONPATH=src torchrun --standalone --nproc_per_node 2 benchmarks/tune_ddp.py --out benchmarks/results/tune-ddp-2xh200.json
    PYTHONPATH=src torchrun --standalone --nproc_per_node 2 benchmarks/tune_ddp.py --smoke --out /tmp/ddp.json  # CPU, gloo

The job is ``benchmarks/tune_resnet18.py``'s (ResNet-18 CIFAR variant, the seeds' basic user). For each
per-rank batch in ``--batches`` (128: the basic user's; 1024: about where the single-GPU throughput
curve flattens, the batch ``tune all`` writes):

1. ``tune ddp`` -- the library call the CLI makes: ``bucket_cap_mb`` 25/10/50/100 without a hook,
   then no hook / fp16 / bf16 at the best size over 3 interleaved rounds (judged on medians) --
   each trial the slowest rank's rate,
   every rank running every trial, the choice agreed from rank 0 (all picks are gathered and
   compared here);
2. an independent A/B check at the chosen bucket: no hook / fp16 / bf16, each arm a fresh DDP
   trainer, arms interleaved over ``--rounds`` (order reversed every other round), the slowest
   rank's wall time over ``--check-steps`` steps, the hook's calls counted (proof it ran) -> the
   tuner's pick must be within its tolerance of the fastest arm.

Every figure in the JSON comes from this run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tune_job import (  # noqa: E402
    REF, SMOKE, command_line, env_facts, make_target, quiet, reexec_for_smoke, release_memory, setup_facts)

from gpudoctor.train import Trainer  # noqa: E402
from gpudoctor.tune.target import TuneTarget  # noqa: E402
from gpudoctor.records.atomic import write_text_atomic  # noqa: E402


class _Cycle:
    """``n`` steps over a few batches already on the device (no loader: the comms are measured)."""

    def __init__(self, batches: list, n: int) -> None:
        self.batches, self.n = batches, n

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        return (self.batches[i % len(self.batches)] for i in range(self.n))


def ab_check(t: TuneTarget, bucket: float, *, rounds: int, warmup: int, steps: int, device: torch.device) -> dict:
    """No hook vs fp16 vs bf16 at ``bucket``, each arm a fresh DDP trainer, interleaved over
    ``rounds`` (the order reversed every other round, so drift hits every arm alike); an arm's rate
    is the slowest rank's wall time over ``steps`` steps after ``warmup``, median over the rounds."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from gpudoctor.train.config import CheckpointConfig, RobustConfig
    from gpudoctor.train.data import move_to_device
    from gpudoctor.tune.trials import SamplePool

    world = dist.get_world_size()
    batch = t.config.batch_size
    pool = SamplePool(t.train_dataset, seed=0)
    batches = [move_to_device(pool.batch(batch), device) for _ in range(2)]
    base = {"fp16": default_hooks.fp16_compress_hook, "bf16": default_hooks.bf16_compress_hook}
    arms = ["none", "fp16", "bf16"]
    rates: dict[str, list[float]] = {a: [] for a in arms}
    calls = {a: 0 for a in arms}
    config = quiet(t.config).replace(
        parallel=dataclasses.replace(t.config.parallel, strategy="ddp", bucket_cap_mb=bucket),
        robust=RobustConfig(oom_recover=False), checkpoint=CheckpointConfig())
    for r in range(rounds):
        for arm in arms if r % 2 == 0 else arms[::-1]:
            trainer = Trainer(t.model_factory(), t.optimizer_factory, t.loss_fn, config=config)
            counter = [0]
            if arm != "none":
                def hook(state, bucket, _base=base[arm], _counter=counter):  # DDP checks the name `bucket`
                    _counter[0] += 1
                    return _base(state, bucket)

                trainer.model.register_comm_hook(None, hook)
            trainer.fit(_Cycle(batches, warmup), epochs=1)  # ends with a SYNC
            dist.barrier()
            t0 = time.perf_counter()
            trainer.fit(_Cycle(batches, steps), epochs=1)  # ends with a SYNC (the tracker's flush)
            elapsed = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=device)
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank sets the job's pace
            rates[arm].append(batch * steps * world / float(elapsed.item()))  # SYNC
            calls[arm] += counter[0]
            del trainer
            release_memory()
    medians = {a: statistics.median(v) for a, v in rates.items()}
    fastest = max(medians, key=medians.get)
    return {"bucket_cap_mb": bucket, "rounds": rounds, "warmup": warmup, "steps": steps,
            "arms": {a: {"global_samples_per_s": [round(x, 1) for x in rates[a]], "median": round(medians[a], 1),
                         "over_fastest": round(medians[a] / medians[fastest], 4), "hook_calls": calls[a]}
                     for a in arms},
            "fastest": fastest}


def main_ddp(args: argparse.Namespace) -> int:
    import torch.distributed as dist

    from gpudoctor.core.device import select_device
    from gpudoctor.core.dist import destroy_distributed, dist_env, init_distributed
    from gpudoctor.records.base import to_dict
    from gpudoctor.report.tune_view import trial_line
    from gpudoctor.tune.session import TuneOptions, tune

    env = dist_env()
    if env.world_size < 2:
        print("benchmarks/tune_ddp.py needs torchrun with 2 or more ranks (torchrun --nproc_per_node 2 ...)", file=sys.stderr)
        return 2
    started = time.perf_counter()
    device = select_device("auto", env)
    init_distributed(env, device)  # this script's group: tune() leaves it alone for the A/B check
    main = env.rank == 0
    out = Path(args.out)
    report: dict = {"command": command_line(), "env": {**env_facts(), "world_size": env.world_size}, "setup": setup_facts(),
                    "bar": "on two GPUs `tune ddp` picks the faster of with/without a compression hook: its pick "
                           "within the tolerance of the fastest arm of an independent A/B check",
                    "runs": [], "skipped": []}

    def save() -> None:
        if main:
            report["total_wall_s"] = round(time.perf_counter() - started, 1)
            out.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(out, json.dumps(report, indent=2, default=str) + "\n")

    tolerance = TuneOptions().tolerance
    last_cost = 0.0
    for batch in args.batches:
        spent = dist_all_max(time.perf_counter() - started, device)  # agreed: every rank skips alike
        if spent + 1.5 * last_cost > args.budget_s:  # a larger batch costs more than the last one
            report["skipped"].append(f"batch {batch}: {spent:.0f} s of --budget-s {args.budget_s:g} spent, the last "
                                     f"batch took {last_cost:.0f} s")
            break
        run_started = time.perf_counter()
        t = make_target(batch)
        t0 = time.perf_counter()
        result = tune(["ddp"], target_ref=REF, target=t, options=TuneOptions(steps=args.steps,
                      warmup=args.warmup), out=out.parent / f"{out.stem}-b{batch}.toml",
                      on_trial=(lambda trial: print(trial_line(trial), file=sys.stderr, flush=True)) if main else None)
        tune_s = time.perf_counter() - t0
        knob = next(k for k in result.knobs if k.knob == "ddp")
        picks = [None] * env.world_size
        dist.all_gather_object(picks, knob.params)
        run: dict = {"batch_per_rank": batch, "tune_wall_s": round(tune_s, 1), "picked": knob.params,
                     "ranks_agree": all(p == picks[0] for p in picks), "per_rank_picks": picks,
                     "summary": knob.summary, "notes": list(knob.notes),
                     "trials": [{"setting": tr.setting, "verdict": tr.verdict.value, "step_ms": tr.step_ms,
                                 "samples_per_s_per_rank": tr.samples_per_s,
                                 "global_samples_per_s": tr.samples_per_s * env.world_size if tr.samples_per_s else None}
                                for tr in knob.trials],
                     "tune": to_dict(result)}
        if knob.params.get("parallel.bucket_cap_mb") is not None:
            check = ab_check(t, knob.params["parallel.bucket_cap_mb"], rounds=args.rounds,
                             warmup=args.warmup, steps=args.check_steps, device=device)
            picked = knob.params["parallel.comm_hook"]  # the engine field tune ddp writes
            check["picked"] = picked
            check["picked_over_fastest"] = check["arms"][picked]["over_fastest"]
            check["tolerance"] = tolerance
            check["pass"] = run["ranks_agree"] and check["picked_over_fastest"] >= 1 - tolerance
            check["picked_is_fastest"] = picked == check["fastest"]
            check["hooks_ran"] = all(check["arms"][h]["hook_calls"] > 0 for h in ("fp16", "bf16"))
            run["check"] = check
        report["runs"].append(run)
        save()
        last_cost = time.perf_counter() - run_started
    destroy_distributed()
    if main:
        save()
        print("\n".join(ddp_summary_lines(report)))
    return 0


def dist_all_max(value: float, device: torch.device) -> float:
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the ranks decide together (a collective + SYNC)
    return float(t.item())


def ddp_summary_lines(r: dict) -> list[str]:
    lines = [f"== tune ddp bench ({r['env'].get('gpu') or 'CPU'} x{r['env']['world_size']}; {r.get('total_wall_s')} s)"]
    for run in r["runs"]:
        lines.append(f"batch {run['batch_per_rank']}/rank: tune ddp {run['tune_wall_s']} s -> {run['summary']}; "
                     f"ranks agree: {run['ranks_agree']}")
        for tr in run["trials"]:
            rate = tr["global_samples_per_s"]
            lines.append(f"  {tr['setting']:<32} {tr['verdict']:<7} {rate:>10,.0f} samples/s" if rate else
                         f"  {tr['setting']:<32} {tr['verdict']}")
        c = run.get("check")
        if c:
            arms = ", ".join(f"{a} {v['median']:,.0f} ({v['over_fastest']:.3f}, {v['hook_calls']} hook calls)"
                             for a, v in c["arms"].items())
            lines.append(f"  A/B check at bucket {c['bucket_cap_mb']:g} MB: {arms}; picked {c['picked']}, fastest "
                         f"{c['fastest']}: {'PASS' if c['pass'] else 'FAIL'}")
    lines += [f"skipped: {s}" for s in r["skipped"]]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--budget-s", type=float, default=150.0, help="start no new batch size after this")
    parser.add_argument("--batches", type=lambda s: [int(x) for x in s.split(",")], default=None,
                        help="per-rank batches, e.g. 128,1024 (--smoke: 32,64)")
    parser.add_argument("--steps", type=int, default=30, help="measured steps per tune ddp trial")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--check-steps", type=int, default=40, help="timed steps per A/B arm and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="CPU dry run under torchrun (gloo): tiny CNN")
    args = parser.parse_args()
    reexec_for_smoke(args.smoke)
    args.batches = args.batches or ([32, 64] if SMOKE else [128, 1024])
    return main_ddp(args)


if __name__ == "__main__":
    raise SystemExit(main())
