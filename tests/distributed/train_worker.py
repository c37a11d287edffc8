"""A tiny training script for the engine's multi-process tests (started by torchrun).

Each rank writes ``<out>/rank{R}-attempt{A}.pt`` with its flattened parameters, its per-step losses
and what ``fit`` returned, so the tests can compare ranks, attempts and runs.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

from gpudoctor.train import CheckpointConfig, ParallelConfig, Trainer, fast_loader, presets


class CrashOnce:
    """Kills this worker after ``step`` the first time (a marker file remembers it happened)."""

    def __init__(self, step: int | None, marker: Path) -> None:
        self.step, self.marker, self.losses = step, marker, []

    def on_run_start(self, info: dict) -> None: ...

    def on_step_end(self, record) -> None:
        self.losses.append(record.loss)
        if self.step is not None and record.step == self.step and not self.marker.exists():
            self.marker.touch()
            os._exit(17)  # a hard crash: no clean-up, as if the node died

    def on_run_end(self, records_emitted: int) -> None: ...


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--accum", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--ckpt-every", type=int, default=None)
    parser.add_argument("--crash-at", type=int, default=None)
    parser.add_argument("--strategy", default="ddp")
    args = parser.parse_args()
    out = Path(args.out)
    rank = int(os.environ["RANK"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 3))
    if rank == 1 and args.strategy == "ddp":  # (FSDP2 does not broadcast: its ranks must init alike)
        with torch.no_grad():
            model[0].weight.add_(1.0)  # prove that DDP's initial broadcast makes ranks agree
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(64, 8, generator=g), torch.randint(0, 3, (64,), generator=g))
    ckpt = CheckpointConfig(dir=str(out / "ckpt"), every_steps=args.ckpt_every) if args.ckpt_every else \
        CheckpointConfig()
    config = presets.cpu_debug().replace(grad_accum_steps=args.accum, parallel=ParallelConfig(strategy=args.strategy),
                                         checkpoint=ckpt)
    # rank 0 dies; the agent stops rank 1 and restarts both
    crash = CrashOnce(args.crash_at if rank == 0 else None, out / f"crashed-rank{rank}")
    trainer = Trainer(model, lambda params: torch.optim.AdamW(params, lr=0.01), nn.CrossEntropyLoss(),
                      config=config, observers=[crash])
    result = trainer.fit(fast_loader(data, 4, num_workers=0, seed=5), epochs=args.epochs)
    from gpudoctor.train.checkpoint import model_state

    state = model_state(trainer.model, trainer.sharded)  # full tensors, also under FSDP2
    flat = torch.cat([v.flatten() for k, v in sorted(state.items())]) if state else None  # FSDP2: rank 0 only
    trainer.close()  # the trainer joined the group, so it leaves it (a barrier first)
    torch.save({"params": flat, "losses": crash.losses, "steps": result.steps, "world": result.world_size,
                "resumed_from": result.resumed_from_step, "global_batch": result.global_batch,
                "group_left": not torch.distributed.is_initialized()},
               out / f"rank{rank}-attempt{attempt}.pt")


if __name__ == "__main__":
    main()
