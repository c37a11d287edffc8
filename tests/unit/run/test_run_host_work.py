"""``gpudoctor run`` names the host work of slow steps by operation: a checkpoint every K steps
(``torch.save``, with the script's function), collector pauses, an evaluation found by the stack
sampler; a clean script gets none of these."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from cli_runner import gpudoctor

# One intra-op thread: on a shared 2-core machine two OpenMP threads that wait for each other
# turned 0.6 ms steps into 120-200 ms ones for twenty steps at a time, saves or not.
HEAD = """import collections, time, torch
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x, y = torch.randn(32, 128), torch.randint(0, 10, (32,))
"""
LOOP = """for step in range({steps}):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""

# A full checkpoint (model + optimizer + 64 MB of other state) every 20 steps: in the default
# 60-step window that leaves two saves in the steady steps (21 and 41), too few for a period.
# Written to memory: a file's write-back slows the next steps on a shared machine as much as the
# save itself (steps 2-20 at 90-200 ms after a 64 MB save to /tmp, 0.6 ms before), which
# the median then carries.
CHECKPOINT = HEAD + """import io
extra = torch.randn(16_000_000)

def save_checkpoint(step):
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "extra": extra}, io.BytesIO())

""" + LOOP.format(steps=200) + """    if step % 20 == 0:
        save_checkpoint(step)
"""

# A large long-lived heap, and per-step records kept for a few steps: they reach the oldest
# generation and every few steps a full collection walks the whole heap.
GC = HEAD + """cache = [[i] for i in range(1_000_000)]
history = collections.deque(maxlen=4)
""" + LOOP.format(steps=200) + """    history.append([{"step": step, "i": [j]} for j in range(20_000)])
"""

# Evaluation every 10 steps: no named operation, the sampler finds the function.
EVAL = HEAD + """val = torch.randn(2048, 128)

def evaluate():
    with torch.no_grad():
        for _ in range(150):
            model(val)

""" + LOOP.format(steps=200) + """    if step % 10 == 0:
        evaluate()
"""

CLEAN = HEAD + LOOP.format(steps=200)

HOST_CODES = ("GD-RUN-HOST-SAVE", "GD-RUN-HOST-LOAD", "GD-RUN-HOST-GC")


def _findings(tmp_path: Path, script: str) -> dict[str, dict]:
    (tmp_path / "train.py").write_text(script, encoding="utf-8")
    result = gpudoctor("run", "--steps", "60", "--json", "--fail-on", "never", "--out", "rd", "--",
                       sys.executable, "train.py", cwd=tmp_path, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    return {f["code"]: f for f in json.loads(result.stdout)["findings"]}


def test_a_checkpoint_every_20_steps_is_named_with_its_function(tmp_path: Path) -> None:
    found = _findings(tmp_path, CHECKPOINT)
    f = found["GD-RUN-HOST-SAVE"]
    assert f["severity"] == "warn", f
    assert "every ~20 steps a step spends" in f["title"]
    assert "in torch.save from save_checkpoint (train.py:" in f["title"]
    assert "dcp.async_save" in f["fix"] and "save_every" in f["fix"]
    assert "2 of " in f["evidence"][0] and "steps 21, 41" in f["evidence"][0]
    assert "MiB each" in f["evidence"][1]  # the bytes written
    assert "GD-RUN-PERIODIC-STALL" not in found  # one finding for the same steps


def test_collector_pauses_get_the_gc_line(tmp_path: Path) -> None:
    found = _findings(tmp_path, GC)
    f = found["GD-RUN-HOST-GC"]
    assert "garbage collection" in f["title"]
    assert any("of them full (generation 2" in e for e in f["evidence"]), f["evidence"]
    assert "gc.freeze()" in f["fix"]


def test_an_evaluation_every_10_steps_is_named_by_the_sampled_stack(tmp_path: Path) -> None:
    found = _findings(tmp_path, EVAL)
    f = found["GD-RUN-PERIODIC-STALL"]
    assert "in evaluate (train.py:" in f["title"], f["title"]
    assert "inference_mode" in f["fix"]
    assert not set(HOST_CODES) & set(found)


def test_a_clean_script_gets_no_host_work_finding(tmp_path: Path) -> None:
    found = _findings(tmp_path, CLEAN)
    assert not set(HOST_CODES) & set(found), found.keys()
    assert "GD-RUN-PERIODIC-STALL" not in found
    steps = (tmp_path / "rd" / "steps-rank0.jsonl").read_text().splitlines()[1:]
    saved = [json.loads(line).get("host_ops", []) for line in steps]
    assert not any(o["op"] == "torch.save" for ops in saved for o in ops)
