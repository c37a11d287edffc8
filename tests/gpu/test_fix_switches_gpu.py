"""``gpudoctor fix`` on a timm-shaped script on a real GPU: its own switches, measured.

Runs with ``pytest -m gpu tests/gpu/test_fix_switches_gpu.py`` (one H200: about 3-5 minutes). The
script is GPU-bound plain fp32 (a conv net on device-resident batches) and implements the fixes
behind its own off-by-default flags (``--amp`` with ``--amp-dtype``, ``--channels-last``), with its
step in a helper called from two branches, as timm's ``train.py`` is written, so no loop is located
and the only fixes are its flags. ``fix`` must plan them as command-line changes, measure each (the
unchanged script with the flags added) and keep bf16 (``--try bf16`` on such a net measured a gain
above the noise on an H200, ``test_try_knobs_gpu.py``); the output ends with the command to run.
It prints the ``--json`` payload's changes for the results table.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli_runner import gpudoctor
from tests.support.gpu import need_gpu

SCRIPT = """
import argparse
from contextlib import suppress
from functools import partial

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--amp", action="store_true", default=False)
parser.add_argument("--amp-dtype", default="float16", type=str)
parser.add_argument("--channels-last", action="store_true", default=False)


def step(model, x, y, opt, amp_autocast):
    with amp_autocast():
        loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def main():
    args = parser.parse_args()
    amp_dtype = torch.float16
    if args.amp and args.amp_dtype == "bfloat16":
        amp_dtype = torch.bfloat16
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 128, 3, padding=1), torch.nn.BatchNorm2d(128), torch.nn.ReLU(),
        torch.nn.Conv2d(128, 256, 3, padding=1), torch.nn.BatchNorm2d(256), torch.nn.ReLU(),
        torch.nn.Conv2d(256, 256, 3, padding=1), torch.nn.BatchNorm2d(256), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(256, 10),
    ).cuda()
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    amp_autocast = suppress
    if args.amp:
        amp_autocast = partial(torch.autocast, device_type="cuda", dtype=amp_dtype)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(128, 3, 64, 64, device="cuda")
    y = torch.randint(0, 10, (128,), device="cuda")
    if args.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    for i in range(100000):
        if i % 2:
            step(model, x, y, opt, amp_autocast)
        else:
            step(model, x, y, opt, amp_autocast)


if __name__ == "__main__":
    main()
"""


@pytest.mark.gpu
def test_fix_measures_the_scripts_own_switches(tmp_path: Path) -> None:
    need_gpu()
    script = tmp_path / "train_switches.py"
    script.write_text(SCRIPT, encoding="utf-8")
    out = gpudoctor("fix", "--json", "--steps", "40", "--out", str(tmp_path / "fix"), str(script), cwd=tmp_path,
                    timeout=540)
    doc = json.loads(out.stdout)
    print(json.dumps({"changes": doc["changes"], "command": doc["command"], "advice": [a["reason"] for a in
                                                                                   doc["advice"]]}, indent=1))
    changes = {c["kind"]: c for c in doc["changes"]}
    assert changes["bf16"]["switches"] == [["--amp"], ["--amp-dtype", "bfloat16"]]
    assert changes["bf16"]["kept"], changes["bf16"]
    assert "--amp" in doc["command"] and "bfloat16" in doc["command"]
    assert doc["diff"] == ""  # nothing patched in the source: the script's own flags
    assert script.read_text(encoding="utf-8") == SCRIPT
