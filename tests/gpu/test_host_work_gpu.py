"""``gpudoctor run`` on a GPU loop that saves a full checkpoint (model + Adam state, ~1.6 GB)
every 20 steps: the top finding names ``torch.save`` and the script's function, and its expected
gain is the one measured by running the same loop without the saves.

Runs with ``pytest -m gpu tests/gpu/test_host_work_gpu.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli_runner import env
from tests.support.gpu import need_gpu

# 8 x Linear(4096, 4096): 134M parameters, 0.54 GB in fp32, and Adam's two moments 1.07 GB more
SCRIPT = """
import sys, torch
torch.manual_seed(0)
layers = []
for _ in range(8):
    layers += [torch.nn.Linear(4096, 4096), torch.nn.GELU()]
model = torch.nn.Sequential(*layers).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
x = torch.randn(512, 4096, device="cuda")

def save_checkpoint(step):
    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, "ckpt.pt")

for step in range(200):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if step % 20 == 0 and "nosave" not in sys.argv:
        save_checkpoint(step)
"""


def _run(tmp: Path, *flags: str) -> tuple[dict, dict]:
    (tmp / "train.py").write_text(SCRIPT, encoding="utf-8")
    out = tmp / ("rd-" + ("-".join(flags) or "save"))
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "run", "--steps", "60", "--json", "--fail-on",
                           "never", "--out", str(out), "--", sys.executable, "train.py", *flags],
                          cwd=tmp, env=env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    return doc, {f["code"]: f for f in doc["findings"]}


@pytest.mark.gpu
def test_a_checkpoint_every_20_steps_is_the_top_finding_with_its_measured_gain(tmp_path: Path) -> None:
    need_gpu()
    doc, found = _run(tmp_path)
    top = doc["findings"][0]
    assert top["code"] == "GD-RUN-HOST-SAVE", [f["title"] for f in doc["findings"]]
    assert top["severity"] == "warn"
    assert "in torch.save from save_checkpoint (train.py:" in top["title"]
    assert "dcp.async_save" in top["fix"]
    assert "GB each" in top["evidence"][1] or "GiB each" in top["evidence"][1]
    # the gain predicted against the gain measured: the same loop without the saves
    from gpudoctor.records.rundir import load_run
    from gpudoctor.analysis.facts import run_facts
    from gpudoctor.analysis.thresholds import Thresholds

    def mean_step(run_dir: Path) -> float:
        return run_facts(load_run(run_dir), Thresholds()).ranks[0].stats.mean_step_ms

    _run(tmp_path, "nosave")
    with_saves, without = mean_step(tmp_path / "rd-save"), mean_step(tmp_path / "rd-nosave")
    measured = 1.0 - without / with_saves
    assert measured >= 0.2, (with_saves, without)
    assert abs(top["expected_gain"] - measured) <= 0.1, (top["expected_gain"], measured)
