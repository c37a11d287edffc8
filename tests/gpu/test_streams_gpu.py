"""Clean streams on a real GPU: what the profiler and CUDA print under ``gpudoctor run`` stays in
the run's stdout.log and off the user's screen (the CPU test sees only the CPU-side lines).

Runs with ``pytest -m gpu tests/gpu/test_streams_gpu.py``. On failure it prints every line the user saw that was
neither the script's nor gpudoctor's: add the ones that are noise to
``gpudoctor.collectors.watch.NOISE`` with the reason.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli_runner import env
from tests.support.gpu import need_gpu


SCRIPT = """
import sys, torch
print("SCRIPT-STDOUT", flush=True)
print("SCRIPT-STDERR", file=sys.stderr, flush=True)
model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
opt = torch.optim.AdamW(model.parameters())
for _ in range(1000):
    x = torch.randn(256, 512, device="cuda")
    loss = model(x).logsumexp(-1).mean()
    opt.zero_grad(); loss.backward(); opt.step()
"""
# A C++ log line of Kineto/glog: LEVEL:date time pid:tid file.cpp:line] message
GLOG = re.compile(r"^[A-Z]+:?\S* \S+ [\d:]+ \S+\.(cpp|cc|h):\d+\]")



gpu = pytest.mark.gpu


@gpu
def test_gpu_run_shows_no_profiler_noise(tmp_path: Path) -> None:
    need_gpu()
    (tmp_path / "s.py").write_text(SCRIPT, encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "gpudoctor", "run", "--steps", "40", "--json", "--fail-on",
                             "never", "--out", "rd", sys.executable, "s.py"],
                            cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    payload = json.loads(result.stdout)
    assert payload["manifest"]["steps_recorded"] == [40]
    assert "SCRIPT-STDOUT" in result.stderr and "SCRIPT-STDERR" in result.stderr
    foreign = [line for line in result.stderr.splitlines()
               if GLOG.match(line) or "Profiler clears events" in line or "UserWarning" in line]
    print("\n".join(foreign) or "no foreign line on stderr")
    assert not foreign, foreign
