"""`gpudoctor tune all` on ResNet-18 (CIFAR variant) in the seeds' "basic user" setup: the bars of issue 10.

    PYTHONPATH=src python bench/tune_resnet18.py --out bench/results/tune-resnet18-h200.json

The job: ResNet-18 (``bench/models.py``: 3x3 stem, no max-pool) on 32x32 images, 50k in-memory uint8
images with per-sample CPU augmentation (pad + random crop, flip, normalise), SGD, the engine's
defaults (``TrainConfig(batch_size=128)``: precision ``auto``, cudnn.benchmark, the default
``fast_loader``). What it measures, in order:

1. ``tune all`` (the torch.compile trial left out: see ``reduced`` in the JSON) -> the tuned config;
2. the true batch limit: an exact bisection, one sample wide, between the largest batch the search
   saw fit and the smallest it saw fail (real steps, same process) -> found / true;
3. one full epoch with evaluation at the largest safe batch the search found, with the settings
   loaded back from the written files (``TrainConfig.from_file``, ``LoaderSettings.from_file``): no
   OOM (the micro-batch split stays 1: the engine would halve it on an OOM);
4. throughput: the written config exactly as the engine loads it (its batch is the throughput knee,
   see docs/tune.md) vs the engine's defaults, each a timed epoch on an already warm trainer ->
   tuned / defaults.

Every figure in the JSON comes from this run; a step that did not fit the time budget is listed as
skipped, with the reason.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from models import resnet18_cifar  # noqa: E402

from gpudoctor.train import LogConfig, Trainer, TrainConfig  # noqa: E402
from gpudoctor.tune.target import LoaderSettings, TuneTarget  # noqa: E402

REF = f"{Path(__file__).resolve()}:target"
MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
IMAGES = int(os.environ.get("TUNE_BENCH_IMAGES", "50000"))
EVAL_IMAGES = int(os.environ.get("TUNE_BENCH_EVAL_IMAGES", "10000"))
BASE_BATCH = 128


class CifarStyle(Dataset):
    """n uint8 HWC images in memory; per-sample CPU augmentation (the seeds' basic user)."""

    def __init__(self, n: int, seed: int = 0, augment: bool = True) -> None:
        g = torch.Generator().manual_seed(seed)
        self.images = torch.randint(0, 256, (n, 32, 32, 3), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, 10, (n,), generator=g)
        self.mean = torch.tensor(MEAN).view(3, 1, 1)
        self.std = torch.tensor(STD).view(3, 1, 1)
        self.augment = augment

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        img = self.images[i].permute(2, 0, 1).float().div_(255)
        if self.augment:
            img = F.pad(img.unsqueeze(0), (4, 4, 4, 4), mode="reflect").squeeze(0)
            dy, dx = torch.randint(0, 9, (2,)).tolist()
            img = img[:, dy:dy + 32, dx:dx + 32]
            if torch.rand(()) < 0.5:
                img = img.flip(2)
        return (img - self.mean) / self.std, self.labels[i]


def _sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)


_DATA: dict[str, Dataset] = {}


def target() -> TuneTarget:
    """The basic user's job with the engine's defaults (what ``gpudoctor tune --target`` loads)."""
    if not _DATA:
        _DATA["train"] = CifarStyle(IMAGES, seed=0)
        _DATA["eval"] = CifarStyle(EVAL_IMAGES, seed=1, augment=False)
    return TuneTarget(model_factory=resnet18_cifar, optimizer_factory=_sgd, loss_fn=nn.CrossEntropyLoss(),
                      train_dataset=_DATA["train"], eval_dataset=_DATA["eval"],
                      config=TrainConfig(batch_size=BASE_BATCH), loader=LoaderSettings())


def _batch_probes(result) -> tuple[int | None, int | None, int | None]:
    """(largest size seen to fit, smallest seen to OOM, chosen) from the batch knob's trials."""
    knob = next((k for k in result.knobs if k.knob == "batch"), None)
    if knob is None:
        return None, None, None
    fit = [t.params["batch_size"] for t in knob.trials if t.knob == "batch" and t.verdict.value == "ok"
           and "chosen" not in t.setting]
    oom = [t.params["batch_size"] for t in knob.trials if t.knob == "batch" and t.verdict.value == "oom"]
    return (max(fit) if fit else None), (min(oom) if oom else None), knob.params.get("max_batch_size")


def exact_limit(tuned: TrainConfig, lo: int, hi: int, deadline: float) -> dict:
    """Bisect to one sample between ``lo`` (fits) and ``hi`` (OOM) with real steps."""
    from gpudoctor.records.tune import TrialVerdict
    from gpudoctor.tune.session import TuneContext, TuneOptions
    from gpudoctor.tune.trials import TrialRunner

    t = target()
    runner = TrialRunner(t, REF, isolation="inline")
    ctx = TuneContext(t, runner, TuneOptions(), device=torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    ctx.config = tuned
    probes = []
    while hi - lo > 1:
        if time.perf_counter() > deadline:
            return {"status": "stopped by the time budget", "lo": lo, "hi": hi, "probes": probes}
        mid = (lo + hi) // 2
        trial = runner.run(ctx.spec("batch", f"batch={mid}", {}, batch_size=mid, warmup=1, steps=2))
        fits = trial.verdict in (TrialVerdict.OK, TrialVerdict.REJECTED)
        probes.append({"batch": mid, "verdict": trial.verdict.value, "wall_s": round(trial.wall_s, 2)})
        print(f"exact: batch={mid} {trial.verdict.value}", file=sys.stderr, flush=True)
        lo, hi = (mid, hi) if fits else (lo, mid)
    return {"status": "exact", "true_limit": lo, "first_oom": hi, "probes": probes}


def _quiet(config: TrainConfig) -> TrainConfig:
    return config.replace(log=LogConfig(progress_bar=False, every_steps=10_000))


def full_epoch_with_eval(config_path: str, loader_path: str, batch: int) -> dict:
    """One full epoch plus evaluation at ``batch`` with the written settings: no OOM means the
    micro-batch split stayed 1 (the engine halves the micro-batch on an OOM instead of crashing)."""
    from gpudoctor.tune.trials import make_loader

    config = _quiet(TrainConfig.from_file(config_path)).replace(batch_size=batch)
    settings = LoaderSettings.from_file(loader_path)
    t = target()
    eval_batch = settings.eval_batch_size or batch
    train_loader = make_loader(t.train_dataset, batch, settings, seed=config.seed or 0)
    eval_loader = make_loader(t.eval_dataset, eval_batch, settings, shuffle=False, drop_last=False)
    trainer = Trainer(resnet18_cifar(), _sgd, nn.CrossEntropyLoss(), config=config)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    fit = trainer.fit(train_loader, epochs=1, val_loader=eval_loader)
    wall = time.perf_counter() - t0
    return {"batch": batch, "eval_batch": eval_batch, "steps": fit.steps, "steps_per_epoch": len(train_loader),
            "epochs_completed": fit.epochs_completed, "micro_batch_split": fit.micro_batch_split,
            "oom_free": fit.micro_batch_split == 1 and fit.epochs_completed == 1 and fit.val_loss is not None,
            "val_loss": fit.val_loss, "train_loss": fit.train_loss, "wall_s": round(wall, 2),
            "precision": fit.precision, "peak_allocated_bytes": torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None}


def tuned_epoch_rate(config_path: str, loader_path: str) -> dict:
    """The written config exactly as the engine loads it: a warm-up epoch, then a timed epoch."""
    from gpudoctor.tune.trials import make_loader

    config = _quiet(TrainConfig.from_file(config_path))
    settings = LoaderSettings.from_file(loader_path)
    t = target()
    loader = make_loader(t.train_dataset, config.batch_size, settings, seed=config.seed or 0)
    trainer = Trainer(resnet18_cifar(), _sgd, nn.CrossEntropyLoss(), config=config)
    trainer.fit(loader, epochs=1)
    timed = trainer.fit(loader, epochs=1)
    return {"batch": config.batch_size, "precision": timed.precision, "channels_last": config.perf.channels_last,
            "loader": settings.to_dict(), "samples_per_s": timed.samples_per_s, "epoch_s": round(timed.elapsed_s, 2),
            "steps": timed.steps, "micro_batch_split": timed.micro_batch_split}


def defaults_run() -> dict:
    """The engine's defaults (TrainConfig(batch_size=128) and its fast_loader): warm up, then an epoch."""
    from gpudoctor.train.data import fast_loader

    t = target()
    config = _quiet(t.config)
    loader = fast_loader(t.train_dataset, BASE_BATCH, seed=config.seed or 0)
    trainer = Trainer(resnet18_cifar(), _sgd, nn.CrossEntropyLoss(), config=config.replace(max_steps=60))
    trainer.fit(loader, epochs=1)
    trainer.config = config  # the same warm trainer, now for a whole epoch
    timed = trainer.fit(loader, epochs=1)
    return {"batch": BASE_BATCH, "precision": timed.precision, "samples_per_s": timed.samples_per_s,
            "epoch_s": round(timed.elapsed_s, 2), "steps": timed.steps}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--budget-s", type=float, default=225.0, help="the whole bench")
    parser.add_argument("--tune-budget-s", type=float, default=120.0, help="tune all's own --budget-s")
    parser.add_argument("--allow-cpu", action="store_true", help="smoke-test the script on a CPU (figures meaningless)")
    args = parser.parse_args()
    started = time.perf_counter()
    deadline = started + args.budget_s
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report: dict = {
        "command": "PYTHONPATH=src python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "env": {"torch": torch.__version__, "python": platform.python_version(),
                "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                "gpus_visible": torch.cuda.device_count(), "cpus": os.cpu_count()},
        "setup": {"model": "ResNet-18 CIFAR variant (bench/models.py)", "images": IMAGES, "eval_images": EVAL_IMAGES,
                  "augmentation": "per-sample CPU: reflect pad 4 + random crop 32, flip, normalise",
                  "optimizer": "SGD lr 0.1 momentum 0.9 nesterov wd 5e-4",
                  "engine_defaults": "TrainConfig(batch_size=128), fast_loader defaults"},
        "reduced": ["torch.compile trial left out (TuneOptions(compile=False), the CLI's --no-compile), to keep "
                    "the job inside its 240 s budget; its compile time was not measured here"],
        "skipped": [],
    }

    def save() -> None:
        out.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")

    if not torch.cuda.is_available() and not args.allow_cpu:
        report["skipped"].append("no CUDA GPU: nothing measured")
        save()
        print("no CUDA GPU", file=sys.stderr)
        return 1
    from gpudoctor.records.base import to_dict
    from gpudoctor.report.tune_view import trial_line
    from gpudoctor.tune.session import TuneOptions, tune

    # 1. tune all
    t0 = time.perf_counter()
    result = tune(["all"], target_ref=REF, options=TuneOptions(budget_s=args.tune_budget_s, compile=False),
                  out=out.parent / "tune-resnet18-tuned.toml",
                  on_trial=lambda trial: print(trial_line(trial), file=sys.stderr, flush=True),
                  on_knob=lambda name: print(f"tuning {name} ...", file=sys.stderr, flush=True))
    tune_s = time.perf_counter() - t0
    report["tune"] = {"wall_s": round(tune_s, 1), "bar_s": 300, "pass": tune_s < 300, "result": to_dict(result)}
    if result.interrupted or any("budget" in k.summary for k in result.knobs):
        report["reduced"].append(f"tune all stopped starting trials at --budget-s {args.tune_budget_s:g}; "
                                 "see each knob's summary")
    save()

    # 2. the true limit
    largest, first_oom, safe = _batch_probes(result)
    limit: dict = {"search_largest_fit": largest, "search_first_oom": first_oom, "found_safe_batch": safe}
    if largest and first_oom and deadline - time.perf_counter() > 50:
        tuned = TrainConfig.from_file(result.config_path)
        tuned = tuned.replace(perf=dataclasses.replace(tuned.perf, compile=False))  # the probes run eager
        limit.update(exact_limit(tuned, largest, first_oom, deadline - 38))
        true = limit.get("true_limit")
        if true and safe:
            limit["found_safe_over_true"] = round(safe / true, 4)
            limit["largest_fit_over_true"] = round(largest / true, 4)
            limit["bar"] = "found safe batch (largest fit minus the margin) within 10% of the true limit"
            limit["pass"] = 0.9 * true <= safe <= true
    elif not (largest and first_oom):
        report["skipped"].append("exact limit: the batch search saw no OOM (capped), so there is no boundary to refine")
    else:
        report["skipped"].append("exact limit probe: not enough time left in the budget")
    report["limit"] = limit
    save()

    # 3. a full epoch with evaluation at the largest safe batch the search found
    if result.config_path and safe and deadline - time.perf_counter() > 30:
        try:
            report["found_batch_epoch"] = full_epoch_with_eval(result.config_path, result.loader_path, safe)
        except torch.OutOfMemoryError as exc:
            report["found_batch_epoch"] = {"batch": safe, "oom_free": False, "error": str(exc)[:300]}
        save()
    else:
        report["skipped"].append("full epoch at the found batch: not enough time left in the budget")

    # 4. the written config vs the engine's defaults, each a timed epoch on a warm trainer
    if result.config_path and deadline - time.perf_counter() > 25:
        report["tuned"] = tuned_epoch_rate(result.config_path, result.loader_path)
        save()
        if deadline - time.perf_counter() > 12:
            report["defaults"] = defaults_run()
            if report["defaults"]["samples_per_s"]:
                speedup = report["tuned"]["samples_per_s"] / report["defaults"]["samples_per_s"]
                report["speedup"] = {"tuned_over_defaults": round(speedup, 3), "bar": 1.2, "pass": speedup >= 1.2}
        else:
            report["skipped"].append("engine-defaults epoch: not enough time left in the budget")
    else:
        report["skipped"].append("tuned vs defaults: not enough time left in the budget")
    report["total_wall_s"] = round(time.perf_counter() - started, 1)
    save()
    summary = {k: report.get(k) for k in ("limit", "found_batch_epoch", "tuned", "defaults", "speedup")}
    knobs = {k["knob"]: k["summary"] for k in report["tune"]["result"]["knobs"]}
    print(json.dumps({"tune_s": report["tune"]["wall_s"], "knobs": knobs, **summary, "skipped": report["skipped"],
                      "reduced": report["reduced"], "total_wall_s": report["total_wall_s"]}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
