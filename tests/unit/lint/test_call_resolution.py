"""Rules follow calls into the project's own helpers, methods and sibling modules (lint/calls.py)."""

from __future__ import annotations

from pathlib import Path

from gpudoctor.lint.engine import lint_paths

UTILS = '''import gc
import torch

def free_memory():
    gc.collect()
    torch.cuda.empty_cache()

def maybe_free(step):
    if step % 100 == 0:
        torch.cuda.empty_cache()

def log_loss(value):
    print(value.item())

def log_detached(value):
    if value.requires_grad:
        return
    print(value)
'''

METERS = '''class AverageMeter:
    def __init__(self):
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.sum += val * n
        self.count += n


class DetachingMeter:
    def __init__(self):
        self.sum = 0

    def update(self, val):
        val = val.detach()
        self.sum += val
'''

TRAIN = '''import torch
import utils
from utils import free_memory, maybe_free, log_detached
from meters import AverageMeter, DetachingMeter


class Trainer:
    def __init__(self):
        self.losses = {"kd": 0.0, "ce": 0.0}
        self.window = 0.0

    def fit(self, loader, model, opt):
        meter = AverageMeter()
        safe = DetachingMeter()
        for step, (x, y) in enumerate(loader):
            loss = model(x.cuda()).sum()
            loss.backward()
            opt.step()
            self.losses["kd"] += loss
            self.losses["ce"] += loss.item()
            meter.update(loss)
            meter.update(loss.item())
            safe.update(loss)
            free_memory()
            maybe_free(step)
            utils.log_loss(loss)
            log_detached(loss)
            local = AverageMeter()
            local.update(loss)
'''


def _project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\\nname = 'x'\\n", encoding="utf-8")
    (tmp_path / "utils.py").write_text(UTILS, encoding="utf-8")
    (tmp_path / "meters.py").write_text(METERS, encoding="utf-8")
    (tmp_path / "train.py").write_text(TRAIN, encoding="utf-8")
    return tmp_path / "train.py"


def test_helpers_across_files_are_followed_and_near_misses_stay_silent(tmp_path: Path) -> None:
    report = lint_paths([_project(tmp_path)], select=["GD201", "GD203", "GD502"])
    found = sorted((v.line, v.code) for v in report.violations)
    # lines 20 and 22 are the plain per-step `.item()` GD502 already reported
    assert found == [(19, "GD201"), (20, "GD502"), (21, "GD201"), (22, "GD502"), (24, "GD203"), (26, "GD502")]
    messages = {v.line: v.message for v in report.violations}
    assert "meters.py:6" in messages[21] and "utils.py:4" in messages[24] and "utils.py:12" in messages[26]


def test_attribute_total_that_is_back_propagated_is_left_alone(tmp_path: Path) -> None:
    f = tmp_path / "acc.py"
    f.write_text("import torch\nclass T:\n    def fit(self, loader):\n        for x in loader:\n"
                 "            loss = self.model(x.cuda()).sum()\n            self.acc += loss\n"
                 "            self.acc.backward()\n            loss.backward()\n            self.opt.step()\n"
                 "            self.acc = 0.0\n", encoding="utf-8")
    assert not lint_paths([f], select=["GD201"]).violations
