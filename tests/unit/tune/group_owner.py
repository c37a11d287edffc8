"""Run under torchrun (2 gloo ranks) by test_tune_group.py: a script that created its own process
group calls ``tune()``; the group must still be there, and usable, afterwards."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist

from gpudoctor.core.dist import destroy_distributed
from gpudoctor.tune.session import TuneOptions, tune


def main() -> None:
    dist.init_process_group("gloo")
    ref = f"{Path(__file__).with_name('tiny_target.py')}:target"
    tune(["precision"], target_ref=ref, options=TuneOptions(steps=2, warmup=1, window_s=0.0))
    assert dist.is_initialized(), "tune() destroyed the caller's process group"
    total = torch.ones(1)
    dist.all_reduce(total)  # still usable
    print(f"GROUP_KEPT rank={dist.get_rank()} sum={int(total.item())}", flush=True)
    destroy_distributed()  # the script's own end: a barrier, then destroy (PyTorch issue 190489)


if __name__ == "__main__":
    main()
