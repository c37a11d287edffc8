"""Clean streams on a real GPU: what the profiler and CUDA print under ``gpudoctor run`` stays in
the run's stdout.log and off the user's screen (the CPU test sees only the CPU-side lines).

Runs with ``pytest -m gpu tests/gpu/test_streams_gpu.py`` or as a script
(``python tests/gpu/test_streams_gpu.py``). On failure it prints every line the user saw that was
neither the script's nor gpudoctor's: add the ones that are noise to
``gpudoctor.collectors.watch.NOISE`` with the reason.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import pytest
except ImportError:  # the device image may lack pytest: run as a script (see the bottom)
    pytest = None

SRC = Path(__file__).resolve().parents[2] / "src"

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


def _need_gpu() -> None:
    import torch

    if not torch.cuda.is_available():
        if pytest is None:
            raise RuntimeError("needs a CUDA GPU")
        pytest.skip("needs a CUDA GPU")


gpu = pytest.mark.gpu if pytest is not None else (lambda fn: fn)


@gpu
def test_gpu_run_shows_no_profiler_noise(tmp_path: Path) -> None:
    _need_gpu()
    (tmp_path / "s.py").write_text(SCRIPT, encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    result = subprocess.run([sys.executable, "-m", "gpudoctor", "run", "--steps", "40", "--json", "--fail-on",
                             "never", "--out", "rd", sys.executable, "s.py"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    payload = json.loads(result.stdout)
    assert payload["manifest"]["steps_recorded"] == [40]
    assert "SCRIPT-STDOUT" in result.stderr and "SCRIPT-STDERR" in result.stderr
    foreign = [line for line in result.stderr.splitlines()
               if GLOG.match(line) or "Profiler clears events" in line or "UserWarning" in line]
    print("\n".join(foreign) or "no foreign line on stderr")
    assert not foreign, foreign


if __name__ == "__main__":  # the device image may lack pytest
    with tempfile.TemporaryDirectory() as tmp:
        try:
            test_gpu_run_shows_no_profiler_noise(Path(tmp))
            print("PASS test_gpu_run_shows_no_profiler_noise")
        except Exception as exc:  # noqa: BLE001
            print(f"FAIL test_gpu_run_shows_no_profiler_noise: {type(exc).__name__}: {exc}")
            sys.exit(1)
