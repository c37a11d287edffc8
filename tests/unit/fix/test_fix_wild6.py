"""Round six of fix on public scripts (held-out test of the switches rule): the flags it missed,
each on a small script of our own: a ``store_true`` flag with a ``store_false`` twin on the same
dest (Vim's ``--if_amp`` / ``--no_amp``), and a flag relayed to ``autocast`` through the constants
its code assigns (timm 0.4's ``--amp`` -> ``args.native_amp`` -> ``use_amp = 'native'``, as in
PoolFormer and MambaVision)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from gpudoctor.cli.fix_flow import argv_for
from tests.support.fix_scripts import AMP_STEP
from tests.support.fix_planning import CPU, advice, planned, runs

# the step in a helper called from two branches (no loop located), as in the timm-derived scripts
LOOP = """

""" + AMP_STEP + """

def main():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.LazyLinear(4))
    model(torch.randn(1, 3, 8, 8))
    amp_autocast = pick_autocast()
    data = torch.utils.data.TensorDataset(torch.randn(16, 3, 8, 8), torch.randint(0, 4, (16,)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, (x, y) in enumerate(torch.utils.data.DataLoader(data, batch_size=8)):
        if i % 2:
            one_step(model, x, y, opt, amp_autocast)
        else:
            one_step(model, x, y, opt, amp_autocast)
    print('done')


if __name__ == '__main__':
    main()
"""

TWIN = """
import argparse
from contextlib import suppress
from functools import partial
import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument('--if_amp', action='store_true')
parser.add_argument('--no_amp', action='store_false', dest='if_amp')
parser.set_defaults(if_amp=False)
args = parser.parse_args()


def pick_autocast():
    amp_autocast = suppress
    if args.if_amp:
        amp_autocast = partial(torch.autocast, device_type='cpu', dtype=torch.bfloat16)
        print('amp on')
    return amp_autocast
""" + LOOP

RELAYED = """
import argparse
from contextlib import suppress
from functools import partial
import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument('--amp', action='store_true', default=False)
parser.add_argument('--apex-amp', action='store_true', default=False)
parser.add_argument('--native-amp', action='store_true', default=False)
args = parser.parse_args()


def pick_autocast():
    use_amp = None
    if args.amp:
        args.native_amp = True
    if args.apex_amp:
        use_amp = 'apex'
    elif args.native_amp:
        use_amp = 'native'
    amp_autocast = suppress
    if use_amp == 'native':
        amp_autocast = partial(torch.autocast, device_type='cpu', dtype=torch.bfloat16)
        print('amp on')
    return amp_autocast
""" + LOOP


def _words(plan, kind):
    change = next(c for c in plan.changes if c.kind == kind)
    return [w for e in change.switches for w in (e.flags[0], e.value) if w]


def test_store_true_twin_of_store_false_is_the_switch():
    _, plan, fixed = planned(TWIN, "GD-RUN-FP32-COMPUTE")
    assert fixed == textwrap.dedent(TWIN)
    assert _words(plan, "bf16") == ["--if_amp"]


def test_two_store_true_on_one_dest_stay_ambiguous():
    source = TWIN.replace("action='store_false', dest='if_amp'", "action='store_true', dest='if_amp'")
    _, plan, _ = planned(source, "GD-RUN-FP32-COMPUTE")
    assert not any(c.kind == "bf16" for c in plan.changes)
    assert "bf16:" in " ".join(a.reason for a in plan.advice)


def test_flag_relayed_through_assigned_constants_is_the_switch():
    _, plan, fixed = planned(RELAYED, "GD-RUN-FP32-COMPUTE")
    assert fixed == textwrap.dedent(RELAYED)
    assert _words(plan, "bf16") == ["--amp"]


def test_relay_to_another_constant_is_no_switch():
    """``--apex-amp`` sets ``use_amp = 'apex'``; autocast is under ``use_amp == 'native'``: the
    compared constant differs, so neither --apex-amp nor a flag relayed only to it counts."""
    source = RELAYED.replace("        args.native_amp = True\n", "        args.apex_amp = True\n") \
        .replace("parser.add_argument('--native-amp', action='store_true', default=False)\n", "") \
        .replace("    elif args.native_amp:\n        use_amp = 'native'\n", "")
    _, plan, _ = planned(source, "GD-RUN-FP32-COMPUTE")
    assert not any(c.kind == "bf16" for c in plan.changes)
    assert advice(plan, "bf16")


def test_relayed_switch_runs_on_cpu(tmp_path: Path):
    _, plan, fixed = planned(RELAYED, "GD-RUN-FP32-COMPUTE", config=CPU)
    argv, _ = argv_for(("python", "train.py"), plan.changes)
    assert "--amp" in argv
    runs(fixed, tmp_path, *argv)
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(tmp_path / "patched.py"), *argv], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert "amp on" in out.stdout


# lightning-hydra-template's shape: the Trainer built from the config by hydra.utils.instantiate in
# train(cfg), which the @hydra.main function calls with its config
HYDRA_TEMPLATE = """
import hydra
import torch
from lightning import LightningDataModule, LightningModule, Trainer
from omegaconf import DictConfig


def train(cfg: DictConfig):
    datamodule: LightningDataModule = hydra.utils.instantiate(cfg.data)
    model: LightningModule = hydra.utils.instantiate(cfg.model)
    trainer: Trainer = hydra.utils.instantiate(cfg.trainer, callbacks=[], logger=[])
    trainer.fit(model=model, datamodule=datamodule)


@hydra.main(version_base="1.3", config_path="../configs", config_name="train.yaml")
def main(cfg: DictConfig):
    train(cfg)


if __name__ == "__main__":
    main()
"""


def test_hydra_instantiated_trainer_gets_overrides():
    _, plan, fixed = planned(HYDRA_TEMPLATE, "GD-RUN-FP32-COMPUTE")
    assert fixed == textwrap.dedent(HYDRA_TEMPLATE)
    assert _words(plan, "bf16") == ["++trainer.precision=bf16-mixed"]
    assert _words(plan, "cudnn_benchmark") == ["++trainer.benchmark=true"]
    assert "Lightning drives the step" in advice(plan, "tf32")


def test_instantiated_trainer_outside_hydra_main_is_advice():
    source = HYDRA_TEMPLATE.replace('@hydra.main(version_base="1.3", config_path="../configs", '
                                    'config_name="train.yaml")\n', "")
    _, plan, _ = planned(source, "GD-RUN-FP32-COMPUTE")
    assert not any(c.kind == "bf16" for c in plan.changes)
    assert "built by hydra.utils.instantiate" in advice(plan, "bf16")


# Pytorch-UNet's step: the accumulated loss is also read by a log and a progress line every step
SYNCED = """
import torch
import torch.nn as nn

model = nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))
loader = torch.utils.data.DataLoader(data, batch_size=4)
log = []
for epoch in range(2):
    epoch_loss = 0
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        epoch_loss += loss.item()
        log.append({'train loss': loss.item()})
    print(f"epoch {epoch} loss {epoch_loss / len(loader):.4f}")
print('done')
"""


def test_item_left_when_the_step_reads_the_same_loss_elsewhere(tmp_path: Path):
    _, plan, fixed = planned(SYNCED, "GD-RUN-HOST-SYNC")
    assert not any(c.kind == "item" for c in plan.changes)
    assert "also read unguarded elsewhere" in advice(plan, "item")
    # without the second read the accumulation is kept on the device, as before
    _, plan, fixed = planned(SYNCED.replace("        log.append({'train loss': loss.item()})\n", ""), "GD-RUN-HOST-SYNC",
                             config=CPU)
    assert [c.kind for c in plan.changes] == ["item"] and "epoch_loss += loss.detach()" in fixed
    runs(fixed, tmp_path)
