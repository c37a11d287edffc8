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
