"""Example CI test: the training step neither synchronises with the host nor leaks memory.

Run it with the gpudoctor pytest plugin (fixtures ``no_sync`` and ``no_leak``):

    pytest -p gpudoctor.testing docs/examples/test_step_hygiene.py

or put ``pytest_plugins = ["gpudoctor.testing"]`` in your top-level ``conftest.py``; or import
the helpers: ``from gpudoctor.testing import assert_no_leak, assert_no_sync``. On a machine with
CUDA the step runs on the GPU and PyTorch's own sync detector watches it; without CUDA the same
test flags the host reads (``.item()``, ``.cpu()``, printing a tensor) that would sync on a GPU.
"""

import pytest
import torch

from gpudoctor.testing import assert_no_leak, assert_no_sync

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def make_step(log_every_step: bool = False, keep_history: bool = False):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1000)).to(DEVICE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(512, 64, device=DEVICE)
    y = torch.randint(0, 1000, (512,), device=DEVICE)
    total = torch.zeros((), device=DEVICE)
    history = []

    def step():
        nonlocal total
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        total += loss.detach()  # the right way: stays on the device, no sync
        if log_every_step:
            print(f"loss {loss.item():.4f}")  # a host-device sync every step
        if keep_history:
            history.append(out)  # logits kept for an epoch metric: 2 MB more every step

    return step


def test_the_step_does_not_sync(no_sync):
    no_sync(make_step(), steps=3)


def test_the_step_does_not_leak(no_leak):
    no_leak(make_step(), steps=20)


def test_logging_every_step_is_caught():
    with pytest.raises(AssertionError, match=r"3 times in 3 steps"):
        assert_no_sync(make_step(log_every_step=True), steps=3)


def test_keeping_outputs_is_caught():
    with pytest.raises(AssertionError, match="per step"):
        assert_no_leak(make_step(keep_history=True), steps=20)
