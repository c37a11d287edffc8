"""The probes hold the user's optimizer and model weakly on a GPU too (collectors/instrument/state.py).

On CUDA the probes also keep CUDA events, lazily read loss/grad-norm tensors and a fused
GradScaler for a step: none of that may keep the script's optimizer (and its device state) or its
model alive once the script drops them, and the GPU memory they held must come back. CPU twin:
tests/unit/run/test_probe_state.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

SRC = Path(__file__).resolve().parents[2] / "src"

SCRIPT = """
import gc, json, weakref, torch
from torch.nn.utils import clip_grad_norm_

def phase(steps):
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    scaler = torch.amp.GradScaler("cuda")
    x, y = torch.randn(256, 1024, device="cuda"), torch.randint(0, 10, (256,), device="cuda")
    for _ in range(steps):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
    return [weakref.ref(opt), weakref.ref(model)]

before = torch.cuda.memory_allocated()
first = phase(8)
gc.collect()
alive = [r() is not None for r in first]
left = torch.cuda.memory_allocated() - before
second = phase(8)
gc.collect()
json.dump({"alive": alive, "alive_second": [r() is not None for r in second], "left_bytes": left},
          open("alive.json", "w"))
"""


def test_optimizer_and_model_are_collected_on_the_gpu(tmp_path: Path) -> None:
    from cli_runner import gpudoctor

    from gpudoctor.records.rundir import load_run

    (tmp_path / "phases.py").write_text(SCRIPT, encoding="utf-8")
    result = gpudoctor("run", "--full", "--no-profile", "--json", "--fail-on", "never", "--out", "rd",
                       "--", sys.executable, "phases.py", cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    alive = json.loads((tmp_path / "alive.json").read_text(encoding="utf-8"))
    print(alive)
    assert alive["alive"] == [False, False] and alive["alive_second"] == [False, False]
    # the model (~17 MiB fp32) and AdamW's state (twice that) came back to the allocator
    assert alive["left_bytes"] < 1 << 20
    steps = load_run(tmp_path / "rd").steps[0]
    assert [s.step for s in steps] == list(range(16))  # the rebuilt optimizer's steps counted too
    assert all(s.gpu_ms is not None for s in steps[1:])  # the CUDA event timing kept working
