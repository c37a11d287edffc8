"""``gpudoctor run`` records the gradient norm the script's ``clip_grad_norm_`` returns (read
lazily, no added sync) and finds a run whose gradients explode."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from cli_runner import gpudoctor

from gpudoctor.records.rundir import load_run

# Linear regression on inputs of scale 10 with lr 0.02: the loss's curvature (~2 x 100) times the
# lr is ~4 > 2, so every step multiplies the error (and the gradient) by about 3: it diverges.
SCRIPT = """
import json, torch
from torch.nn.utils import clip_grad_norm_
torch.manual_seed(0)
x, y = torch.randn(256, 8) * 10, torch.randn(256, 1)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.02)
norms = []
for step in range(24):  # finite all along (step 29 would overflow to inf)
    i = (step * 32) % 256
    loss = torch.nn.functional.mse_loss(model(x[i:i + 32]), y[i:i + 32])
    opt.zero_grad()
    loss.backward()
    norms.append(float(clip_grad_norm_(model.parameters(), max_norm=float("inf"))))
    opt.step()
json.dump(norms, open("norms.json", "w"))
"""


def test_exploding_gradients_are_recorded_and_found(tmp_path: Path) -> None:
    (tmp_path / "diverge.py").write_text(SCRIPT, encoding="utf-8")
    result = gpudoctor("run", "--steps", "40", "--no-profile", "--json",
                       "--fail-on", "never", "--out", "rd", "--", sys.executable, "diverge.py",
                       cwd=tmp_path, timeout=90)
    assert result.returncode == 0, result.stderr[-3000:]
    norms = json.loads((tmp_path / "norms.json").read_text(encoding="utf-8"))
    steps = load_run(tmp_path / "rd").steps[0]
    assert [s.grad_norm for s in steps] == norms  # the value clip_grad_norm_ returned, each step
    assert norms[-1] > 1e6 * norms[5]
    findings = {f["code"]: f for f in json.loads(result.stdout)["findings"]}
    f = findings["GD-RUN-GRAD-EXPLODING"]
    assert f["severity"] == "warn" and f["title"].startswith("Gradient norm grows ")
    assert f["evidence"][0].startswith("rank 0: global gradient norm (clip_grad_norm_) median ")
