"""``gpudoctor run`` on a script whose steps slow down steadily (seed 000 §6 Q5: a growing
Python list of tensors summed every step) names it as slowing down, with the trend."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from cli_runner import gpudoctor

SCRIPT = """import torch
torch.manual_seed(0)
model = torch.nn.Linear(64, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 64), torch.randn(32, 1)
losses = []
for step in range(150):
    per_sample = torch.nn.functional.mse_loss(model(x), y, reduction="none")
    loss = per_sample.mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.extend(per_sample.unbind())       # tensors, not .item(): the list grows 32 a step
    running = sum(losses) / len(losses)      # and is summed every step: the step grows
"""


def test_steadily_slower_steps_are_named_with_the_trend(tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text(SCRIPT, encoding="utf-8")
    result = gpudoctor("run", "--steps", "250", "--no-profile", "--json",
                       "--fail-on", "never", "--out", "rd", "--", sys.executable, "slow.py",
                       cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    findings = {f["code"]: f for f in json.loads(result.stdout)["findings"]}
    f = findings["GD-RUN-SLOWDOWN"]
    trend = re.fullmatch(r"Training slows down over time: \+(\d+\.\d\d) ms per 100 steps "
                         r"\(\+(\d+\.\d)% over the run\)", f["title"])
    assert trend is not None, f["title"]
    # 32 more tensor adds per step: +7.1 to +7.8 ms per 100 steps, R² 0.97-0.99 (5 runs on a
    # busy 2-core machine)
    assert float(trend.group(1)) > 0.0 and float(trend.group(2)) >= 10.0
    assert f["evidence"][0].startswith("rank 0: the fitted step time went from ")
