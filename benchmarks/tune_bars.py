"""The bars of issue 17 on one GPU: `tune all` with its default budget on two models outside the
project's own benchmarks, and `tune all --script` on an unmodified public fp32 script.

    PYTHONPATH=src python benchmarks/tune_bars.py --case resnet50 --out /tmp/r50.json
    PYTHONPATH=src python benchmarks/tune_bars.py --case gpt124m  --out /tmp/gpt.json
    PYTHONPATH=src python benchmarks/tune_bars.py --case script --script-path .public/imagenet_main.py --out /tmp/s.json
    PYTHONPATH=src python benchmarks/tune_bars.py --case resnet50 --smoke --out /tmp/smoke.json   # CPU dry run
    PYTHONPATH=src python benchmarks/tune_bars.py --case gpt124m --per-call-class --out /tmp/gpt-pc.json

* ``resnet50``: torchvision ResNet-50 (100 classes) on 160x160 crops of in-memory uint8 images with
  per-sample CPU augmentation (random resized crop, flip, normalise), SGD, starting from
  ``TrainConfig(batch_size=256)``.
* ``gpt124m``: GPT-2 small (124M; transformers' ``GPT2LMHeadModel`` when installed, else a
  nanoGPT-style model of the same shape) on random token sequences of 1024, AdamW, starting from
  ``TrainConfig(batch_size=16)``.
* ``script``: pytorch/examples ``imagenet/main.py -a ARCH --dummy -b 256 -j 4`` (unmodified: the
  lead copies it from the mirror into an ignored folder) through ``tune all --script``; ``--arch``
  picks the network (resnet18 by default; its fake-data loader caps it near 4,000 samples/s on 16
  cores, above what its fp32 step needs only once the loader is tuned).

For the two models: ``tune all`` with the default budget (finished? its time), then the written
configuration (or the starting one when nothing was written) against the starting configuration
and the engine's defaults (``TrainConfig()``, default loader), each as training runs it (the real
DataLoader), interleaved over 3 rounds -> written/start (bar >= 1.0) and written/defaults (bar >= 1.2
where the tables show headroom). For the script: the chosen ``--try`` spec, whether it holds bf16
(or fp16) and its gain from the confirmation rounds (bar >= 1.3), with the spreads. ``--smoke``
shrinks everything (tiny models, small data, short budget) so every step runs on a CPU; its
figures mean nothing. ``--per-call-class`` wraps the model in a class the factory defines at every
call (a new type per trial, as a user's factory can make; ``TUNE_BARS_PER_CALL=1`` in the
environment, so trial processes see it too): every compile trial must still compile (the JSON's
``compile_watch``: compile trials, resets before a trial whose model types changed, trials dynamo
ran eager) instead of running eager past dynamo's recompile limit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Dataset

from gpudoctor.records.base import to_dict
from gpudoctor.train import TrainConfig
from gpudoctor.tune.target import LoaderSettings, TuneTarget

SMOKE = {"on": False}


class AugmentedImages(Dataset):
    """Uint8 images in memory; each sample is cropped, flipped and normalised on the CPU."""

    def __init__(self, n: int, side: int, crop: int, classes: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.images = torch.randint(0, 256, (n, 3, side, side), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, classes, (n,), generator=g)
        self.crop = crop

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        img = self.images[i]
        side = img.shape[-1]
        scale = float(torch.empty(1).uniform_(0.35, 1.0))
        size = max(8, int(side * scale ** 0.5))
        top, left = (int(torch.randint(0, side - size + 1, (1,))) for _ in range(2))
        patch = img[:, top:top + size, left:left + size].float().unsqueeze(0)
        patch = nn.functional.interpolate(patch, size=(self.crop, self.crop), mode="bilinear", align_corners=False)[0]
        if torch.rand(1) < 0.5:
            patch = patch.flip(-1)
        return (patch / 255.0 - 0.45) / 0.225, self.labels[i]


class Tokens(Dataset):
    def __init__(self, n: int, block: int, vocab: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.data = torch.randint(0, vocab, (n, block + 1), generator=g)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int):
        return self.data[i, :-1], self.data[i, 1:]


class _Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        n = x.shape[1]
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool, device=x.device), 1)
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class MiniGPT(nn.Module):
    """nanoGPT's shape (used only where transformers is missing)."""

    def __init__(self, vocab: int, block: int, layers: int, d: int, heads: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.Sequential(*[_Block(d, heads) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return self.head(self.ln(self.blocks(x)))


class HFGPT(nn.Module):
    """transformers' GPT2LMHeadModel returning logits. At module level: a class made inside a
    function is a new type per model, and torch.compile's guard on the module's type then
    recompiles the engine's step for every trial until dynamo's recompile limit (8) sends it back
    to eager (the first H200 run of this bar: the written, compiled config measured as eager)."""

    def __init__(self, vocab: int, block: int, layers: int, d: int, heads: int) -> None:
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel

        self.m = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=block, n_embd=d, n_layer=layers,
                                            n_head=heads))

    def forward(self, idx):
        return self.m(input_ids=idx).logits


def _gpt_model(vocab: int, block: int, layers: int, d: int, heads: int) -> nn.Module:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return MiniGPT(vocab, block, layers, d, heads)
    return HFGPT(vocab, block, layers, d, heads)


def _lm_loss(logits, targets):
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _per_call(make):
    """``make`` wrapped in a class defined at every call when ``TUNE_BARS_PER_CALL=1``."""
    if os.environ.get("TUNE_BARS_PER_CALL") != "1":
        return make

    def factory() -> nn.Module:
        class PerCall(nn.Module):  # a new type per call: dynamo's type guard fails in every trial
            def __init__(self) -> None:
                super().__init__()
                self.inner = make()

            def forward(self, x):
                return self.inner(x)

        return PerCall()

    return factory


def resnet50_target() -> TuneTarget:
    if SMOKE["on"]:
        data, make = AugmentedImages(512, 40, 32, 10), (lambda: nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10)))
        start = 32
    else:
        import torchvision

        data, make, start = AugmentedImages(20_000, 192, 160, 100), (lambda: torchvision.models.resnet50(num_classes=100)), 256
    return TuneTarget(model_factory=_per_call(make),
                      optimizer_factory=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
                      loss_fn=nn.CrossEntropyLoss(), train_dataset=data, config=TrainConfig(batch_size=start))


def gpt124m_target() -> TuneTarget:
    if SMOKE["on"]:
        data, make, start = Tokens(256, 32, 128), (lambda: MiniGPT(128, 32, 2, 32, 2)), 8
    else:
        data, make, start = Tokens(4096, 1024, 50257), (lambda: _gpt_model(50257, 1024, 12, 768, 12)), 16
    return TuneTarget(model_factory=_per_call(make), optimizer_factory=lambda p: torch.optim.AdamW(p, lr=3e-4),
                      loss_fn=_lm_loss, train_dataset=data, config=TrainConfig(batch_size=start))


def _compare(ref: str, target: TuneTarget, arms: dict, rounds: int, seconds: float) -> dict:
    """Each arm (config, loader) as training runs it (real DataLoader), interleaved over rounds."""
    from gpudoctor.tune.noise import rotated
    from gpudoctor.tune.session import TuneContext, TuneOptions, aggregate
    from gpudoctor.tune.trials import SamplePool, TrialSpec, execute

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ctx = TuneContext(target, None, TuneOptions(budget_s=None), device=device)
    pools = {"train": SamplePool(target.train_dataset)}
    names = list(arms)
    runs: dict[str, list] = {n: [] for n in names}
    for r in range(rounds):
        for name in rotated(names, r):
            config, loader = arms[name]
            batch = max(1, min(config.batch_size or 32, len(target.train_dataset)))
            probe = runs[name][-1].samples_per_s if runs[name] and runs[name][-1].samples_per_s else None
            steps = max(10, int(seconds * probe / batch)) if probe else 20
            spec = TrialSpec(knob="bars", setting=name, params={}, config=ctx.trial_config(config), mode="loader",
                             loader=loader.to_dict(), batch_size=batch, warmup=7, steps=steps)
            runs[name].append(execute(target, spec, pools))
    return {n: to_dict(aggregate(runs[n])) for n in names}


def engine_case(case: str, out: dict, args) -> None:
    from gpudoctor.tune.session import TuneOptions, tune

    ref = f"{Path(__file__).resolve()}:{case}_target"
    target = resnet50_target() if case == "resnet50" else gpt124m_target()
    options = TuneOptions(budget_s=args.budget_s) if args.budget_s else TuneOptions()
    if SMOKE["on"]:
        options = TuneOptions(budget_s=args.budget_s or 120.0, steps=2, warmup=1, window_s=0.05, compile=False)
    t0 = time.perf_counter()
    result = tune(["all"], target_ref=ref, target=target, options=options, out=Path(args.out).with_suffix(".toml"),
                  on_say=lambda m: print(m, file=sys.stderr, flush=True))
    out["tune"] = {"elapsed_s": time.perf_counter() - t0, "budget_s": options.budget_s, "finished":
                   not result.interrupted and not any(k.summary.startswith(("cut", "budget spent")) for k in result.knobs),
                   "written": result.config_path, "kept_start": result.kept_start, "result": to_dict(result)}
    Path(args.out).write_text(json.dumps(out, indent=1, default=str))  # kept if the comparison is cut short
    arms = {"start": (target.config, target.loader), "defaults": (TrainConfig(), LoaderSettings())}
    if not result.kept_start:  # when nothing was written, training runs the starting configuration itself
        arms["written"] = (TrainConfig.from_dict(result.config), LoaderSettings.from_dict(result.loader))
    rows = _compare(ref, target, arms, rounds=3, seconds=0.2 if SMOKE["on"] else 4.0)
    out["compare"] = rows
    rate = {n: rows[n]["samples_per_s"] for n in rows}
    rate.setdefault("written", rate["start"])
    out["bars"] = {"kept_start": result.kept_start,
                   "written_vs_start": rate["written"] / rate["start"] if rate["start"] else None,
                   "written_vs_defaults": rate["written"] / rate["defaults"] if rate["defaults"] else None}


def script_case(out: dict, args) -> None:
    from gpudoctor.tune.script import tune_script

    if SMOKE["on"]:
        command = (sys.executable, str(Path(__file__).resolve().parents[1] / "tests/unit/tune/chatty_script.py"))
    else:
        command = (sys.executable, args.script_path, "-a", args.arch, "--dummy", "-b", "256", "-j", "4")
    kw = dict(steps=3, warmup=2, repeats=1, worker_counts=(1,)) if SMOKE["on"] else {}
    result = tune_script(["all"], command, budget_s=args.budget_s or 420.0, on_say=lambda m: print(m, file=sys.stderr),
                         on_trial=lambda t: print(t.setting, t.samples_per_s, t.spread, file=sys.stderr), **kw)
    spec = result.loader.get("try", "")
    final = next(k for k in result.knobs if k.knob == "script:result")
    gain = None
    if len(final.trials) == 2 and all(t.samples_per_s for t in final.trials):
        gain = final.trials[1].samples_per_s / final.trials[0].samples_per_s
    out["tune"] = {"command": list(command), "try": spec, "summary": final.summary, "result": to_dict(result)}
    out["bars"] = {"picks_16bit": any(k in spec.split(",") for k in ("bf16", "fp16")), "gain": gain,
                   "spreads": [t.spread for k in result.knobs for t in k.trials]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", choices=("resnet50", "gpt124m", "script"), required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--budget-s", type=float, default=None, help="default: tune's own default budget")
    parser.add_argument("--script-path", default=".public/imagenet_main.py")
    parser.add_argument("--arch", default="resnet18", help="script case: the imagenet script's -a")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--per-call-class", action="store_true", help="the model class made per call (see above)")
    args = parser.parse_args()
    SMOKE["on"] = args.smoke
    if args.per_call_class:
        os.environ["TUNE_BARS_PER_CALL"] = "1"
    out: dict = {"case": args.case, "argv": sys.argv, "device": torch.cuda.get_device_name(0)
                 if torch.cuda.is_available() else "cpu", "smoke": args.smoke}
    t0 = time.perf_counter()
    if args.case == "script":
        script_case(out, args)
    else:
        engine_case(args.case, out, args)
    out["wall_s"] = time.perf_counter() - t0
    from gpudoctor.tune import compile_watch

    out["compile_watch"] = {"per_call_class": args.per_call_class, **compile_watch.counts}
    Path(args.out).write_text(json.dumps(out, indent=1, default=str))
    print(json.dumps({"case": args.case, "bars": out["bars"], "wall_s": round(out["wall_s"]),
                      "compile_watch": out["compile_watch"]}, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
