"""In-process tune trials and dynamo's cache: does a compile trial still compile at the Nth trial?

    PYTHONPATH=src python benchmarks/tune_compile_cache.py --backend eager --trials 14
    PYTHONPATH=src python benchmarks/tune_compile_cache.py --backend inductor --trials 14 --out /tmp/cc.json

Runs ``--trials`` compile trials of a tiny MLP through ``gpudoctor.tune.trials.execute`` (the
engine's compiled step, as ``tune --target`` runs them), cycling fp32 / bf16 and growing the
batch (a dynamic dimension), in four fresh processes: the model class defined at module level or
made per call by the factory (a new type every trial), each with the watch of
``gpudoctor/tune/compile_watch.py`` (``on``) and without it (``off``: the trials as they ran
before it); and the module-level class with a reset whenever the autocast dtype changes too
(``dtype``: the rule not taken, it recompiles graphs the cache already held). Per arm:
graphs dynamo compiled (``counters["stats"]["unique_graphs"]``), dynamo's recompile-limit hits,
trials rejected as eager, resets, and the wall time of all trials. ``--backend`` replaces the
engine's ``torch.compile(fn, mode=...)`` with ``torch.compile(fn, backend=...)`` (``eager``:
dynamo alone, no code generation, seconds on a CPU). Each arm runs in a fresh process with an
empty inductor cache directory (a first tune run). On a GPU the trials run on ``cuda``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset


class ModuleLevelMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def per_call_mlp() -> nn.Module:
    class PerCallMLP(nn.Module):  # a new type at every call, as a user's factory can make one
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

    return PerCallMLP()


def _arm(case: str, backend: str, watched: str, trials: int) -> dict:
    from torch._dynamo.utils import counters

    from gpudoctor.records.tune import TrialVerdict
    from gpudoctor.train import TrainConfig, engine
    from gpudoctor.train.config import PerfConfig, PrecisionConfig
    from gpudoctor.tune import compile_watch, trials as trials_mod
    from gpudoctor.tune.session import TuneContext, TuneOptions
    from gpudoctor.tune.target import LoaderSettings, TuneTarget

    engine.maybe_compile = lambda fn, config: torch.compile(fn, backend=backend) if config.compile else fn
    if watched == "off":  # the trials as they ran before the watch
        def unwatched(model, *, compiling):
            return contextlib.nullcontext(compile_watch.Watch())

        trials_mod.compile_watch = type("Off", (), {"watch": staticmethod(unwatched)})
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(512, 32, generator=g), torch.randint(0, 4, (512,), generator=g))
    target = TuneTarget(model_factory=ModuleLevelMLP if case == "module" else per_call_mlp,
                        optimizer_factory=lambda p: torch.optim.SGD(p, lr=0.01), loss_fn=nn.CrossEntropyLoss(),
                        train_dataset=data, config=TrainConfig(device=device.type),
                        loader=LoaderSettings(num_workers=0))
    ctx = TuneContext(target, None, TuneOptions(budget_s=None), device=device)
    pools = {"train": trials_mod.SamplePool(data)}
    before = counters["stats"]["unique_graphs"]
    rows, t0, dtype_resets = [], time.perf_counter(), 0
    for i in range(trials):
        dtype = "bf16" if i % 3 == 1 else "fp32"
        batch = 16 if i < 6 else 16 + 8 * (i - 5)  # a few trials at one size, then a growing one
        config = target.config.replace(precision=PrecisionConfig(dtype=dtype), perf=PerfConfig(compile=True))
        spec = ctx.spec("precision", f"{dtype} batch={batch} compile", {}, config=config, batch_size=batch,
                        warmup=2, steps=3)
        graphs = counters["stats"]["unique_graphs"]
        if watched == "dtype" and rows and dtype not in rows[-1]["setting"]:
            torch.compiler.reset()  # the rule not taken: also reset when the autocast dtype changes
            dtype_resets += 1
        trial = trials_mod.execute(target, spec, pools)
        rows.append({"trial": i + 1, "setting": spec.setting, "verdict": trial.verdict.value,
                     "new_graphs": counters["stats"]["unique_graphs"] - graphs, "wall_s": round(trial.wall_s, 3),
                     "reason": trial.reason})
    wall = time.perf_counter() - t0
    hits = sum(n for k, n in counters["unimplemented"].items() if "limit" in k.lower())
    resets = dtype_resets + (compile_watch.counts["type_resets"] if watched != "off" else 0)
    return {"case": case, "backend": backend, "watch": watched, "trials": trials, "device": str(device),
            "torch": torch.__version__, "graphs": counters["stats"]["unique_graphs"] - before,
            "limit_hits": hits, "rejected": sum(r["verdict"] == TrialVerdict.REJECTED.value for r in rows),
            "resets": resets, "wall_s": round(wall, 2), "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="eager", help="torch.compile backend: eager (dynamo alone) or inductor")
    parser.add_argument("--trials", type=int, default=14)
    parser.add_argument("--repeats", type=int, default=1, help="fresh processes per arm")
    parser.add_argument("--out", default=None, help="write every arm's rows as JSON here")
    parser.add_argument("--arm", default=None, help=argparse.SUPPRESS)  # case:watch, run in a child process
    args = parser.parse_args()
    if args.arm:
        case, watched = args.arm.split(":")
        print(json.dumps(_arm(case, args.backend, watched, args.trials)))
        return 0
    arms = []
    for case, watched in (("module", "off"), ("module", "on"), ("module", "dtype"), ("per-call", "off"),
                          ("per-call", "on")):
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as cache:  # each arm from a cold inductor cache, as a first tune is
                proc = subprocess.run([sys.executable, __file__, "--backend", args.backend, "--trials",
                                       str(args.trials), "--arm", f"{case}:{watched}"], capture_output=True, text=True,
                                      check=True, env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache})
            arm = json.loads(proc.stdout.strip().splitlines()[-1])
            arms.append(arm)
            print(f"{case:9} watch {watched:5}  {arm['trials']} trials  graphs {arm['graphs']:2}  limit hits "
                  f"{arm['limit_hits']}  rejected {arm['rejected']:2}  resets {arm['resets']:2}  "
                  f"{arm['wall_s']:6.2f} s", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(arms, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
