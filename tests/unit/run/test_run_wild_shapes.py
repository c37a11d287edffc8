"""Loop shapes met on public scripts (benchmarks/corpus/run_wild.py), each on a small script of
our own: what ``gpudoctor run`` records and says.

Hogwild (pytorch/examples ``mnist_hogwild``): the main process starts ``mp.Process(target=train)``
children that train a shared model and never steps itself. Those children are not probed, so
the run has no step; gpudoctor must not claim the script took none, and must say where they went.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from cli_runner import gpudoctor

HOGWILD = """
import torch, torch.multiprocessing as mp

def train(rank, model):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
    print("trained", rank, flush=True)

if __name__ == "__main__":
    mp.set_start_method("spawn", force=True)
    model = torch.nn.Linear(8, 1)
    model.share_memory()
    procs = [mp.Process(target=train, args=(r, model)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    print("done", flush=True)
"""


def test_hogwild_children_are_named_not_taken_for_no_training(tmp_path: Path) -> None:
    (tmp_path / "hogwild.py").write_text(HOGWILD, encoding="utf-8")
    result = gpudoctor("run", "--full", "--no-profile", "--fail-on", "never", "--out", "rd",
                       "--", sys.executable, "hogwild.py", cwd=tmp_path, timeout=120)
    log = (tmp_path / "rd" / "stdout.log").read_text()
    assert log.count("trained") == 2 and "done" in log  # the script ran whole, unchanged
    manifest = json.loads((tmp_path / "rd" / "manifest.json").read_text())["data"]
    assert manifest["status"] == "no_steps" and result.returncode == 1
    said = result.stderr + " ".join(manifest["notes"])
    assert "without a single optimizer step" not in result.stderr
    assert "started 2 process(es)" in said and "__main__.train" in said
    assert "torch.multiprocessing.spawn" in said


# Forward-Forward (pytorch/examples ``mnist_forward_forward``): one optimizer per layer, trained
# layer after layer. The first optimizer stops stepping after its phase; the second phase, longer
# than the stall limit, must not be taken for a stall.
PHASES = """
import time, torch

def phase(steps, pause):
    layer = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(layer.parameters(), lr=0.01)
    for _ in range(steps):
        opt.zero_grad()
        layer(torch.randn(4, 8)).pow(2).mean().backward()
        opt.step()
        time.sleep(pause)
    return layer, opt  # kept alive, as a model's layers keep theirs

kept = [phase(10, 0.0), phase(150, 0.05)]
print("phases done", flush=True)
"""


def test_an_optimizer_trained_after_the_first_takes_over_the_steps(tmp_path: Path) -> None:
    (tmp_path / "phases.py").write_text(PHASES, encoding="utf-8")
    result = gpudoctor("run", "--full", "--no-profile", "--fail-on", "never", "--stall-timeout", "4",
                       "--out", "rd", "--", sys.executable, "phases.py", cwd=tmp_path, timeout=120)
    manifest = json.loads((tmp_path / "rd" / "manifest.json").read_text())["data"]
    assert manifest["status"] == "completed", (manifest["status"], result.stderr[-2000:])
    assert "phases done" in (tmp_path / "rd" / "stdout.log").read_text()
    # 10 steps of the first optimizer, then the second's from its 20th step on (20..150)
    assert manifest["steps_recorded"] == [10 + 150 - 19]


# nanoGPT on the CPU builds ``torch.cuda.amp.GradScaler(enabled=True)``: torch warns that CUDA is
# not available, aimed at its caller. Under the probes the warning must name the same file as
# unprobed, not gpudoctor's GradScaler wrapper.
SCALER = """
import warnings, torch
warnings.simplefilter("default")
scaler = torch.cuda.amp.GradScaler(enabled=True)
opt = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
for _ in range(3):
    opt.step()
"""


def test_a_warning_under_a_probe_names_the_file_it_names_unprobed(tmp_path: Path) -> None:
    import subprocess

    import pytest
    import torch

    if torch.cuda.is_available():
        pytest.skip("the warning is about CUDA being unavailable")
    (tmp_path / "scaler.py").write_text(SCALER, encoding="utf-8")
    plain = subprocess.run([sys.executable, "scaler.py"], cwd=tmp_path, capture_output=True, text=True)
    gpudoctor("run", "--full", "--no-profile", "--fail-on", "never", "--out", "rd",
              "--", sys.executable, "scaler.py", cwd=tmp_path, timeout=120)
    log = (tmp_path / "rd" / "stdout.log").read_text()

    def where(text: str) -> list[str]:
        return [line.split(": UserWarning")[0] for line in text.splitlines()
                if "UserWarning: torch.cuda.amp.GradScaler is enabled" in line]

    assert where(plain.stderr) and where(log) == where(plain.stderr)
    assert "gpudoctor" not in log


# stdout and stderr reach gpudoctor on two pipes; a stdout line written in two parts (print's
# text, then its newline, unbuffered) with a warning on stderr between them must stay one line
# in stdout.log (nanoGPT's "found vocab_size" line took a warning into its middle).
SPLIT = """
import os, time
os.write(1, b"found vocab_size = 65")
time.sleep(0.4)
os.write(2, b"UserWarning: between\\n")
time.sleep(0.4)
os.write(1, b"\\n")
import torch
opt = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
opt.step()
"""


def test_a_line_written_in_two_parts_stays_whole_in_the_log(tmp_path: Path) -> None:
    (tmp_path / "split.py").write_text(SPLIT, encoding="utf-8")
    gpudoctor("run", "--full", "--no-profile", "--fail-on", "never", "--out", "rd",
              "--", sys.executable, "split.py", cwd=tmp_path, timeout=120)
    lines = (tmp_path / "rd" / "stdout.log").read_text().splitlines()
    assert "found vocab_size = 65" in lines and "UserWarning: between" in lines
