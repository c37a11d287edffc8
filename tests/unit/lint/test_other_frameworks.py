"""A file whose GPU work belongs to another framework (MXNet, TensorFlow, JAX, Paddle) and that
never imports torch is not PyTorch GPU code: the torch advice (`torch.cuda.synchronize()`,
DataLoader workers) does not apply to it (second held-out run: an MXNet/Gluon training script
that imports only torchvision's transforms and names `--no-cuda`)."""

from __future__ import annotations

from gpudoctor.lint.config import LintConfig
from gpudoctor.lint.engine import lint_text
from gpudoctor.lint.registry import ALL_RULES

GLUON = """\
import argparse
import time

import mxnet as mx
from mxnet import autograd, gluon
from torchvision.transforms import transforms

parser = argparse.ArgumentParser()
parser.add_argument("--no-cuda", action="store_true")
args = parser.parse_args()
context = mx.cpu() if args.no_cuda else mx.gpu(0)


def train(net, trainer, loss_fn, loader, epochs):
    for epoch in range(epochs):
        tic = time.time()
        for data, label in loader:
            with autograd.record():
                loss = loss_fn(net(data), label)
            loss.backward()
            trainer.step(data.shape[0])
        elapsed = time.time() - tic
        print(epoch, elapsed)
"""

TORCH = GLUON.replace("import mxnet as mx\n", "import mxnet as mx\nimport torch\n")


def _codes(source: str) -> list[str]:
    return [v.code for v in lint_text(source, "train.py", list(ALL_RULES), LintConfig())]


def test_a_file_with_gpu_work_of_another_framework_gets_no_torch_advice() -> None:
    assert _codes(GLUON) == []


def test_the_same_file_importing_torch_is_checked() -> None:
    assert "GD501" in _codes(TORCH)


GLUON_NO_ZERO_GRAD = """\
from mxnet import autograd, gluon


def fit(net, optimizer, loss_fn, loader):
    for X, y in loader:
        with autograd.record():
            loss = loss_fn(net(X), y)
        loss.backward()
        optimizer.step(1)
"""


def test_gluon_trainer_step_without_zero_grad_is_not_reported() -> None:
    # twelfth held-out round: d2l-en's d2l/mxnet.py (Gluon overwrites gradients on each backward)
    assert "GD602" not in _codes(GLUON_NO_ZERO_GRAD)


def test_the_same_loop_in_a_torch_file_is_still_reported() -> None:
    assert "GD602" in _codes("import torch\n" + GLUON_NO_ZERO_GRAD)
