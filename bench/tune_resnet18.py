"""`gpudoctor tune all` on ResNet-18 (CIFAR variant) in the seeds' "basic user" setup: the bars of issue 10.

    PYTHONPATH=src python bench/tune_resnet18.py --out bench/results/tune-resnet18-h200.json

The job: ResNet-18 (``bench/models.py``: 3x3 stem, no max-pool) on 32x32 images, 50k in-memory uint8
images with per-sample CPU augmentation (pad + random crop, flip, normalise), SGD, the engine's
defaults (``TrainConfig(batch_size=128)``: precision ``auto``, cudnn.benchmark, the default
``fast_loader``). What it measures, in order:

1. ``tune all`` (the torch.compile trial left out: see ``reduced`` in the JSON) -> the tuned config;
2. the true batch limit: an exact bisection, one sample wide, between the largest batch the search
   saw fit and the smallest it saw fail (real steps, same process) -> found / true;
3. one full epoch with evaluation at the tuned config and batch, loaded back from the written files
   (``TrainConfig.from_file``, ``LoaderSettings.from_file``): no OOM (micro-batch split stays 1);
4. throughput: a second epoch with the tuned config vs an epoch with the engine's defaults, each on
   an already warm trainer -> tuned / defaults.

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
    return (max(fit) if fit else None), (min(oom) if oom else None), knob.params.get("batch_size")


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


def epoch_runs(config_path: str, loader_path: str) -> dict:
    """A full epoch with evaluation at the tuned settings, then a timed epoch on the warm trainer."""
    from gpudoctor.tune.trials import make_loader

    config = _quiet(TrainConfig.from_file(config_path))
    settings = LoaderSettings.from_file(loader_path)
    t = target()
    batch = config.batch_size
    eval_batch = settings.eval_batch_size or batch
    train_loader = make_loader(t.train_dataset, batch, settings, seed=config.seed or 0)
    eval_loader = make_loader(t.eval_dataset, eval_batch, settings, shuffle=False, drop_last=False)
    trainer = Trainer(resnet18_cifar(), _sgd, nn.CrossEntropyLoss(), config=config)
    t0 = time.perf_counter()
    first = trainer.fit(train_loader, epochs=1, val_loader=eval_loader)
    epoch_s = time.perf_counter() - t0
    timed = trainer.fit(train_loader, epochs=1)
    peak = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None
    return {
        "batch": batch, "eval_batch": eval_batch, "steps": first.steps, "steps_per_epoch": len(train_loader),
        "micro_batch_split": first.micro_batch_split, "oom_free": first.micro_batch_split == 1,
        "val_loss": first.val_loss, "train_loss": first.train_loss, "epoch_with_eval_s": round(epoch_s, 2),
        "precision": first.precision, "timed_epoch_samples_per_s": timed.samples_per_s,
        "timed_epoch_s": round(timed.elapsed_s, 2), "peak_allocated_bytes": peak,
    }


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
    largest, first_oom, chosen = _batch_probes(result)
    limit: dict = {"search_largest_fit": largest, "search_first_oom": first_oom, "chosen": chosen}
    if largest and first_oom and deadline - time.perf_counter() > 70:
        tuned = TrainConfig.from_file(result.config_path)
        tuned = tuned.replace(perf=dataclasses.replace(tuned.perf, compile=False))  # the probes run eager
        limit.update(exact_limit(tuned, largest, first_oom, deadline - 55))
        true = limit.get("true_limit")
        if true:
            limit["chosen_over_true"] = round(chosen / true, 4)
            limit["largest_fit_over_true"] = round(largest / true, 4)
            limit["bar"] = "chosen within 10% of the true limit"
            limit["pass"] = chosen >= 0.9 * true
    elif not (largest and first_oom):
        report["skipped"].append("exact limit: the batch search saw no OOM (capped), so there is no boundary to refine")
    else:
        report["skipped"].append("exact limit probe: not enough time left in the budget")
    report["limit"] = limit
    save()

    # 3. + 4. a full epoch with evaluation at the tuned settings, then tuned vs defaults
    if result.config_path and deadline - time.perf_counter() > 25:
        try:
            report["tuned_epoch"] = epoch_runs(result.config_path, result.loader_path)
        except torch.OutOfMemoryError as exc:
            report["tuned_epoch"] = {"oom_free": False, "error": str(exc)[:300]}
        save()
    else:
        report["skipped"].append("tuned epoch: not enough time left in the budget")
    if deadline - time.perf_counter() > 12:
        report["defaults"] = defaults_run()
        tuned_rate = report.get("tuned_epoch", {}).get("timed_epoch_samples_per_s")
        if tuned_rate and report["defaults"]["samples_per_s"]:
            speedup = tuned_rate / report["defaults"]["samples_per_s"]
            report["speedup"] = {"tuned_over_defaults": round(speedup, 3), "bar": 1.2, "pass": speedup >= 1.2}
    else:
        report["skipped"].append("engine-defaults epoch: not enough time left in the budget")
    report["total_wall_s"] = round(time.perf_counter() - started, 1)
    save()
    summary = {k: report.get(k) for k in ("limit", "speedup")}
    print(json.dumps({"tune_s": report["tune"]["wall_s"], **summary, "tuned_epoch": report.get("tuned_epoch"),
                      "skipped": report["skipped"], "reduced": report["reduced"]}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
