"""`gpudoctor tune` on ResNet-18 (CIFAR variant) in the seeds' "basic user" setup: the bars of issue 10.

    PYTHONPATH=src python benchmarks/tune_resnet18.py --out benchmarks/results/tune-resnet18-h200.json --budget-s 370
    PYTHONPATH=src python benchmarks/tune_resnet18.py --smoke --out /tmp/smoke.json     # CPU dry run

The job: ResNet-18 (``benchmarks/models.py``: 3x3 stem, no max-pool) on 32x32 images, 50k in-memory uint8
images with per-sample CPU augmentation (pad + random crop, flip, normalise), SGD, the engine's
defaults (``TrainConfig(batch_size=128)``: precision ``auto``, channels_last ``auto``,
cudnn.benchmark, the default ``fast_loader``). One GPU, in this order (what the bars need most first):

1. ``tune all`` -> the tuned config (the torch.compile trial only with ``--compile``; see
   ``reduced`` in the JSON);
2. two full epochs, each with evaluation, at the largest safe batch the search found, with the
   settings loaded back from the written files (``TrainConfig.from_file``,
   ``LoaderSettings.from_file``): no OOM (the micro-batch split stays 1: the engine would halve it
   on an OOM instead of crashing);
3. throughput: the written config exactly as the engine loads it vs the engine's defaults, each
   timed over two epochs on an already warm trainer -> tuned / defaults;
4. the true batch limit: the search's bracket (largest batch seen to fit, smallest seen to run out
   of memory) probed again with real steps, then narrowed to ``--resolution`` (1% of the batch) ->
   found safe batch / true limit, worst case over the bracket.

The 2-GPU bar (the ddp knob's hook choice) is ``benchmarks/tune_ddp.py``, on this same target.

Every figure in the JSON comes from this run; a step that did not fit the time budget is listed as
skipped, with the reason. ``--smoke`` swaps in a tiny CNN with a simulated memory limit (a real
``torch.OutOfMemoryError`` above 200 samples) and small data, so every step's code runs on a CPU;
its figures mean nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tune_job import (  # noqa: E402  (the job; its target is also this module's `target`)
    BASE_BATCH, REF, SMOKE, sgd, command_line, env_facts, make_target, quiet, reexec_for_smoke,
    setup_facts, target)

from gpudoctor.core.memory import release_cached_memory  # noqa: E402
from gpudoctor.train import Trainer, TrainConfig  # noqa: E402
from gpudoctor.tune.target import LoaderSettings  # noqa: E402
from gpudoctor.records.atomic import write_text_atomic  # noqa: E402

__all__ = ["target"]  # `gpudoctor tune --target benchmarks/tune_resnet18.py:target` loads the job's target
RESERVE_S = 120.0  # of --budget-s kept from tune all for the epochs, tuned vs defaults and the true limit


def _batch_facts(result) -> dict:
    """What the batch knob found: largest size seen to fit, smallest seen to OOM, the safe batch
    (largest fit minus the margin), the batch written (the knee) and a probe's cost near the top."""
    knob = next((k for k in result.knobs if k.knob == "batch"), None)
    if knob is None:
        return {}
    probes = [t for t in knob.trials if t.knob == "batch" and not t.setting.endswith(")")]
    fit = [t for t in probes if t.verdict.value == "ok"]
    oom = [t.params["batch_size"] for t in probes if t.verdict.value == "oom"]
    largest = max((t.params["batch_size"] for t in fit), default=None)
    top = [t.wall_s for t in fit if largest and t.params["batch_size"] >= 0.5 * largest]
    return {"search_largest_fit": largest, "search_first_oom": min(oom) if oom else None,
            "found_safe_batch": knob.params.get("max_batch_size"), "written_batch": knob.params.get("batch_size"),
            "search_probes": len(probes), "search_probe_s": round(sum(t.wall_s for t in probes), 1),
            "probe_cost_s": round(max(top), 1) if top else None, "summary": knob.summary, "notes": list(knob.notes)}


def found_batch_epochs(config_path: str, loader_path: str, batch: int, epochs: int) -> dict:
    """``epochs`` full epochs, each followed by evaluation, at ``batch`` with the written settings."""
    from gpudoctor.tune.trials import make_loader

    config = quiet(TrainConfig.from_file(config_path)).replace(batch_size=batch)
    settings = LoaderSettings.from_file(loader_path)
    t = make_target()
    eval_batch = settings.eval_batch_size or batch
    train_loader = make_loader(t.train_dataset, batch, settings, seed=config.seed or 0)
    eval_loader = make_loader(t.eval_dataset, eval_batch, settings, shuffle=False, drop_last=False)
    trainer = Trainer(t.model_factory(), sgd, nn.CrossEntropyLoss(), config=config)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    fit = trainer.fit(train_loader, epochs=epochs, val_loader=eval_loader)
    wall = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None
    out = {"batch": batch, "eval_batch": eval_batch, "epochs": epochs, "epochs_completed": fit.epochs_completed,
           "steps": fit.steps, "steps_per_epoch": len(train_loader), "samples": fit.samples,
           "dataset": len(t.train_dataset), "micro_batch_split": fit.micro_batch_split,
           "oom_free": fit.micro_batch_split == 1 and fit.epochs_completed == epochs and fit.val_loss is not None,
           "val_loss": fit.val_loss, "train_loss": fit.train_loss, "wall_s": round(wall, 2),
           "precision": fit.precision, "peak_allocated_bytes": peak}
    del trainer, train_loader, eval_loader
    release_cached_memory()
    return out


def _timed(trainer: Trainer, loader, epochs: int) -> dict:
    fit = trainer.fit(loader, epochs=epochs)
    return {"samples_per_s": fit.samples_per_s, "elapsed_s": round(fit.elapsed_s, 2), "steps": fit.steps,
            "epochs": epochs, "micro_batch_split": fit.micro_batch_split, "precision": fit.precision}


def tuned_rate(config_path: str, loader_path: str, epochs: int) -> dict:
    """The written config exactly as the engine loads it: a warm-up epoch, then ``epochs`` timed."""
    from gpudoctor.tune.trials import make_loader

    config = quiet(TrainConfig.from_file(config_path))
    settings = LoaderSettings.from_file(loader_path)
    t = make_target()
    loader = make_loader(t.train_dataset, config.batch_size, settings, seed=config.seed or 0)
    trainer = Trainer(t.model_factory(), sgd, nn.CrossEntropyLoss(), config=config)
    trainer.fit(loader, epochs=1)
    out = {"batch": config.batch_size, "channels_last": config.perf.channels_last, "compile": config.perf.compile,
           "loader": settings.to_dict(), **_timed(trainer, loader, epochs)}
    del trainer, loader
    release_cached_memory()
    return out


def defaults_rate(epochs: int) -> dict:
    """The engine's defaults (TrainConfig(batch_size=128), fast_loader): 60 warm-up steps, then
    ``epochs`` timed."""
    from gpudoctor.train.data import fast_loader

    t = make_target()
    config = quiet(t.config)
    loader = fast_loader(t.train_dataset, BASE_BATCH, seed=config.seed or 0)
    trainer = Trainer(t.model_factory(), sgd, nn.CrossEntropyLoss(), config=config.replace(max_steps=60))
    trainer.fit(loader, epochs=1)
    trainer.config = config  # the same warm trainer, now for whole epochs
    out = {"batch": BASE_BATCH, **_timed(trainer, loader, epochs)}
    del trainer, loader
    release_cached_memory()
    return out


def true_limit(config: TrainConfig, lo: int, hi: int, *, resolution: float, deadline: float,
               probe_cost: float) -> dict:
    """Probe the search's bracket again (``lo`` must fit, ``hi`` must not), widen it if either
    disagrees, then narrow it to ``resolution``: the same real steps as the search's probes."""
    from gpudoctor.records.tune import TrialVerdict
    from gpudoctor.tune.search import narrow
    from gpudoctor.tune.session import TuneContext, TuneOptions
    from gpudoctor.tune.trials import TrialRunner

    t = make_target()
    runner = TrialRunner(t, REF, isolation="inline")
    ctx = TuneContext(t, runner, TuneOptions(), device=torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    ctx.config = config.replace(perf=dataclasses.replace(config.perf, compile=False))  # the probes run eager
    probes: list[dict] = []

    class OutOfTime(Exception):
        pass

    def fits(size: int) -> bool:
        seen = next((p["fits"] for p in probes if p["batch"] == size), None)
        if seen is not None:  # probed in this step already
            return seen
        if deadline - time.perf_counter() < probe_cost * 1.2 + 5:
            raise OutOfTime
        trial = runner.run(ctx.spec("batch", f"batch={size}", {}, batch_size=size, warmup=1, steps=2))
        ok = trial.verdict in (TrialVerdict.OK, TrialVerdict.REJECTED)
        probes.append({"batch": size, "fits": ok, "verdict": trial.verdict.value, "wall_s": round(trial.wall_s, 2),
                       "peak_mem_bytes": trial.peak_mem_bytes})
        print(f"true limit: batch={size} {trial.verdict.value} ({trial.wall_s:.1f} s)", file=sys.stderr, flush=True)
        return ok

    out: dict = {"resolution": resolution, "probes": probes}
    try:
        step = max(1, int(lo * 2 * resolution))
        for _ in range(8):  # the largest fit seen by the search must fit now; if not, walk down
            if fits(lo) or lo == 1:
                break
            hi, lo, step = lo, max(1, lo - step), step * 2
        step = max(1, int(hi * 2 * resolution))
        for _ in range(8):  # the first OOM seen by the search must fail now; if not, walk up
            if not fits(hi):
                break
            lo, hi, step = hi, hi + step, step * 2
        narrow(fits, lo, hi, resolution=resolution)
        status = f"bracketed to {resolution:.0%}"
    except OutOfTime:
        status = "stopped by the time budget"
    # only sizes probed here count: the largest that fit below the smallest that failed
    failed = [p["batch"] for p in probes if not p["fits"]]
    first_oom = min(failed, default=None)
    fitted = [p["batch"] for p in probes if p["fits"] and (first_oom is None or p["batch"] < first_oom)]
    largest = max(fitted, default=None)
    complete = largest is not None and first_oom is not None
    out.update(status=status if complete else f"{status}; no bracket (a fit and a failure) was probed",
               largest_fit=largest, first_oom=first_oom)
    release_cached_memory()
    return out


def main_single(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    deadline = started + args.budget_s

    def left() -> float:
        return deadline - time.perf_counter()

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    reduced = [] if args.compile else [
        "torch.compile trial left out (TuneOptions(compile=False), the CLI's --no-compile): when compile wins, "
        "the knee check, every loader trial, the epochs with evaluation and the tuned run each compile again, "
        "a cascade one device call cannot always absorb; rerun with --compile (job: TUNE_COMPILE=1) and a "
        "larger budget to include it"]
    report: dict = {"command": command_line(), "env": env_facts(), "setup": setup_facts(), "budget_s": args.budget_s,
                    "order": ["tune all", "epochs with eval at the found batch", "tuned vs defaults", "true limit"],
                    "reduced": reduced, "skipped": []}

    def save() -> None:
        report["total_wall_s"] = round(time.perf_counter() - started, 1)
        write_text_atomic(out, json.dumps(report, indent=2, default=str) + "\n")

    if not torch.cuda.is_available() and not args.allow_cpu:
        report["skipped"].append("no CUDA GPU: nothing measured")
        save()
        print("no CUDA GPU (use --smoke for a CPU dry run)", file=sys.stderr)
        return 1
    from gpudoctor.records.base import to_dict
    from gpudoctor.report.tune_view import trial_line
    from gpudoctor.tune.session import TuneOptions, tune

    # 1. tune all (its budget leaves the other steps their time when the whole budget is small)
    tune_budget = min(args.tune_budget_s, max(30.0, args.budget_s - RESERVE_S))
    if tune_budget < args.tune_budget_s:
        report["reduced"].append(f"tune all's budget cut from {args.tune_budget_s:g} s to {tune_budget:g} s to leave "
                                 f"{RESERVE_S:g} s of --budget-s {args.budget_s:g} for the other steps")
    t0 = time.perf_counter()
    options = TuneOptions(budget_s=tune_budget, compile=args.compile)
    result = tune(["all"], target_ref=REF, target=make_target(), options=options,
                  out=out.parent / f"{out.stem.replace('-h200', '')}-tuned.toml",
                  on_trial=lambda trial: print(trial_line(trial), file=sys.stderr, flush=True),
                  on_knob=lambda name: print(f"tuning {name} ...", file=sys.stderr, flush=True))
    tune_s = time.perf_counter() - t0
    report["tune"] = {"wall_s": round(tune_s, 1), "bar_s": 300, "pass": tune_s < 300, "budget_s": tune_budget,
                      "result": to_dict(result)}
    if result.interrupted or any("budget" in k.summary for k in result.knobs):
        report["reduced"].append(f"tune all stopped starting trials at --budget-s {tune_budget:g}; "
                                 "see each knob's summary")
    facts = _batch_facts(result)
    report["batch"] = facts
    save()
    safe = facts.get("found_safe_batch")
    cost = facts.get("probe_cost_s") or 15.0

    def guarded(name: str, fn):
        """One step; an error is recorded and the next step still runs."""
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - the bench reports, it does not stop
            report.setdefault("errors", []).append(f"{name}: {type(exc).__name__}: {exc}"[:400])
            release_cached_memory()
            return None

    # 2. full epochs with evaluation at the largest safe batch the search found
    if not (result.config_path and safe):
        report["skipped"].append("epochs at the found batch: the batch knob chose no batch")
    elif left() < max(30.0, 2.5 * cost):
        report["skipped"].append(f"epochs at the found batch: {left():.0f} s left in the budget")
    else:
        def epochs() -> dict:
            try:
                return found_batch_epochs(result.config_path, result.loader_path, safe, args.epochs)
            except torch.OutOfMemoryError as exc:
                release_cached_memory()
                return {"batch": safe, "oom_free": False, "error": str(exc)[:300]}

        report["found_batch_epoch"] = guarded("epochs at the found batch", epochs)
        save()

    # 3. the written config vs the engine's defaults
    if not result.config_path:
        report["skipped"].append("tuned vs defaults: no config was written")
    elif left() < 25 + (60 if result.config.get("perf", {}).get("compile") else 0):
        report["skipped"].append(f"tuned vs defaults: {left():.0f} s left in the budget")
    else:
        report["tuned"] = guarded("tuned run", lambda: tuned_rate(result.config_path, result.loader_path, args.epochs))
        save()
        if report["tuned"] and left() > 15:
            report["defaults"] = guarded("defaults run", lambda: defaults_rate(args.epochs))
            if report["defaults"] and report["defaults"]["samples_per_s"]:
                speedup = report["tuned"]["samples_per_s"] / report["defaults"]["samples_per_s"]
                report["speedup"] = {"tuned_over_defaults": round(speedup, 3), "bar": 1.2, "pass": speedup >= 1.2}
        elif report["tuned"]:
            report["skipped"].append(f"engine-defaults epochs: {left():.0f} s left in the budget")
        save()

    # 4. the true limit around the search's bracket
    lo, hi = facts.get("search_largest_fit"), facts.get("search_first_oom")
    limit: dict = {}
    if not (lo and hi and safe):
        report["skipped"].append("true limit: the batch search saw no OOM (capped) or chose nothing: no boundary")
    elif left() < cost * 1.2 + 5:
        report["skipped"].append(f"true limit: {left():.0f} s left in the budget")
    else:
        tuned = TrainConfig.from_file(result.config_path)
        limit = guarded("true limit", lambda: true_limit(tuned, lo, hi, resolution=args.resolution,
                                                         deadline=deadline, probe_cost=cost)) or {}
    if limit.get("largest_fit") and limit.get("first_oom"):
        fit_max, oom_min = limit["largest_fit"], limit["first_oom"]
        # the true limit is in [fit_max, oom_min - 1]: judge the found batch against the worst case
        limit["true_limit_range"] = [fit_max, oom_min - 1]
        limit["bracket_width"] = round((oom_min - fit_max) / fit_max, 4)
        limit["found_safe_batch"] = safe
        limit["found_over_true_worst"] = round(safe / (oom_min - 1), 4)
        limit["found_over_true_best"] = round(safe / fit_max, 4)
        limit["bar"] = "found safe batch >= 90% of the true limit's upper bound, and not above the largest that fit"
        limit["pass"] = 0.9 * (oom_min - 1) <= safe <= fit_max
    report["limit"] = limit
    save()
    print("\n".join(summary_lines(report)))
    return 0


def summary_lines(r: dict) -> list[str]:
    """The few lines a person reads at the end of the job (the bars last: a log's tail shows them)."""
    def verdict(ok) -> str:
        return "PASS" if ok else ("FAIL" if ok is not None else "n/a")

    lines = [f"== tune bench ({r['env'].get('gpu') or 'CPU'}; {r.get('total_wall_s')} s of {r.get('budget_s')} s)"]
    tune = r.get("tune")
    for k in tune["result"]["knobs"] if tune else []:
        lines.append(f"  {k['knob']}: {k['summary']}"[:180])
    b = r.get("batch") or {}
    if b:
        lines.append(f"batch search: {b.get('search_probes')} probes in {b.get('search_probe_s')} s; fit "
                     f"{b.get('search_largest_fit')}, OOM {b.get('search_first_oom')}, safe {b.get('found_safe_batch')}, "
                     f"written {b.get('written_batch')}")
    for what in ("reduced", "skipped", "errors"):
        lines += [f"{what}: {item}"[:220] for item in r.get(what, [])]
    if tune:
        lines.append(f"BAR tune all: {tune['wall_s']} s (< 300 s: {verdict(tune['pass'])})")
    e = r.get("found_batch_epoch")
    if e:
        lines.append(f"BAR found batch {e['batch']}: {e.get('epochs_completed')} epochs + eval, {e.get('steps')} steps, "
                     f"split {e.get('micro_batch_split')}: OOM-free {verdict(e.get('oom_free'))}")
    lim = r.get("limit") or {}
    if "true_limit_range" in lim:
        lines.append(f"BAR true limit in {lim['true_limit_range']} ({lim['status']}, {len(lim['probes'])} probes): "
                     f"found {lim['found_safe_batch']} = {lim['found_over_true_worst']:.3f}..{lim['found_over_true_best']:.3f}"
                     f" of it (>= 0.9: {verdict(lim['pass'])})")
    s = r.get("speedup")
    if s:
        lines.append(f"BAR tuned {r['tuned']['samples_per_s']:,.0f} samples/s (batch {r['tuned']['batch']}) vs defaults "
                     f"{r['defaults']['samples_per_s']:,.0f}: {s['tuned_over_defaults']}x (>= 1.2: {verdict(s['pass'])})")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--budget-s", type=float, default=370.0, help="the whole bench (it stops starting steps)")
    parser.add_argument("--tune-budget-s", type=float, default=210.0, help="tune all's own --budget-s")
    parser.add_argument("--compile", action="store_true", help="include the torch.compile trial in tune all")
    parser.add_argument("--resolution", type=float, default=0.01, help="true limit: bracket width / batch")
    parser.add_argument("--epochs", type=int, default=2, help="epochs at the found batch, and timed epochs")
    parser.add_argument("--allow-cpu", action="store_true", help="run on a CPU (figures meaningless)")
    parser.add_argument("--smoke", action="store_true", help="CPU dry run: tiny CNN, simulated memory limit")
    args = parser.parse_args()
    reexec_for_smoke(args.smoke)
    args.allow_cpu = args.allow_cpu or args.smoke or SMOKE
    return main_single(args)


if __name__ == "__main__":
    raise SystemExit(main())
