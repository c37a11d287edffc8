"""``gpudoctor run`` on a script whose steps slow down steadily (seed 000 §6 Q5: a growing
Python list of loss tensors, kept instead of ``.item()``, summed every step) names it as slowing
down, with the trend."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from cli_runner import gpudoctor

# The list grows one tensor a step and is summed every step, as in the seed; its cost is made a
# wait that grows with the list (0.3 ms per kept tensor), not CPU work: CPU work is stretched by
# whatever else runs on the machine, in bursts, and on a loaded 2-core machine (load average 8)
# the planted +7 ms per 100 steps of tensor adds once went unnamed. A wait is the same on a busy
# machine, so the planted slow-down (+30 ms per 100 steps) is what the rule sees.
SCRIPT = """import time
import torch
torch.manual_seed(0)
model = torch.nn.Linear(64, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 64), torch.randn(32, 1)
losses = []
for step in range(120):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss)                      # the tensor, not .item(): the list grows a step
    running = sum(losses) / len(losses)      # and is summed every step
    time.sleep(0.0003 * len(losses))         # the summing's cost, grown with the list
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
    # +29.2 to +31.8 ms per 100 steps, R² 1.00, +373% to +513% (6 runs on a 2-core machine at
    # load average 2.3-2.6; 6 more passed at 3.1-4.9)
    assert float(trend.group(1)) > 0.0 and float(trend.group(2)) >= 10.0
    assert f["evidence"][0].startswith("rank 0: the fitted step time went from ")
