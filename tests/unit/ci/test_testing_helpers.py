"""``gpudoctor.testing``: assert_no_sync / assert_no_leak, and the example CI test that uses them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest
import torch

from gpudoctor.testing import assert_no_leak, assert_no_sync, growth_per_step

ROOT = Path(__file__).resolve().parents[3]
HOST_READS = ("item", "tolist", "numpy", "cpu", "__bool__", "__repr__", "__format__")


def _tensor_methods() -> dict:
    return {name: torch.Tensor.__dict__.get(name) for name in HOST_READS}


def _cpu_step(read: bool = False, prints: bool = False, adam: bool = False):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    opt = (torch.optim.Adam if adam else torch.optim.SGD)(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 8), torch.randn(16, 2)

    def step():
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if read:
            loss.item()  # the planted host read
        if prints:
            print(loss)

    return step


def test_a_clean_step_passes_and_host_reads_are_named_with_their_line() -> None:
    before = _tensor_methods()
    assert_no_sync(_cpu_step(), steps=3)
    assert_no_sync(_cpu_step(adam=True), steps=3)  # Adam's own .item() of its host step count: no sync
    with pytest.raises(AssertionError) as info:
        assert_no_sync(_cpu_step(read=True), steps=3)
    message = str(info.value)
    line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1)
                if "loss.item()  # the planted" in text)
    assert "3 times in 3 steps" in message
    assert f"3 x {__file__}:{line} (Tensor.item)" in message
    with pytest.raises(AssertionError, match=r"2 times in 2 steps:\n  2 x .*\(Tensor\.(__format__|__repr__)\)\nfix"):
        assert_no_sync(_cpu_step(prints=True), steps=2)  # a print is one read, not its inner .item()s
    assert _tensor_methods() == before  # wrappers out again, after a pass and after a failure


class FakeCuda:
    """Stands in for ``torch.cuda``: the sync debug mode, and ``synchronize``."""

    def __init__(self) -> None:
        self.mode = "error"
        self.synced = 0

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def get_sync_debug_mode(self):
        return self.mode

    def set_sync_debug_mode(self, mode) -> None:
        self.mode = mode

    def synchronize(self, device=None) -> None:
        self.synced += 1


def test_on_cuda_torchs_sync_warnings_and_explicit_synchronize_fail_the_step() -> None:
    cuda = FakeCuda()
    fake = types.SimpleNamespace(cuda=cuda, Tensor=torch.Tensor)
    original_sync = cuda.synchronize

    def step():
        if cuda.mode == "warn":  # what torch does under set_sync_debug_mode("warn")
            warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)
            warnings.warn_explicit("called a synchronizing CUDA operation", UserWarning,
                                   "/x/site-packages/torch/amp/grad_scaler.py", 1)  # fp16's own: allowed
        cuda.synchronize()

    with pytest.raises(AssertionError) as info:
        assert_no_sync(step, steps=2, torch_module=fake)
    message = str(info.value)
    assert "synchronised with the host 4 times in 2 steps" in message
    assert "(synchronizing CUDA operation)" in message and "(torch.cuda.synchronize)" in message
    assert "grad_scaler" not in message
    assert cuda.mode == "error" and cuda.synchronize == original_sync  # restored
    assert cuda.synced == 3  # warm-up + 2 observed: the wrapper called through

    quiet = FakeCuda()
    assert_no_sync(lambda: None, steps=2, torch_module=types.SimpleNamespace(cuda=quiet, Tensor=torch.Tensor))
    assert quiet.mode == "error"


def test_growth_is_measured_between_quarters_so_spikes_pass_and_steady_leaks_fail() -> None:
    assert growth_per_step([100] * 20) == 0
    spike = [100] * 20
    spike[10] = 10**9
    assert growth_per_step(spike) == 0
    every_other = [100 + 1000 * (i // 2) for i in range(20)]
    assert growth_per_step(every_other) == pytest.approx(500, rel=0.2)
    readings = iter(range(0, 10**9, 8192))
    with pytest.raises(AssertionError, match=r"grew by 8\.0 KiB per step"):
        assert_no_leak(lambda: None, steps=8, memory=lambda: next(readings), max_growth_bytes=4096)
    with pytest.raises(ValueError, match="at least 4"):
        assert_no_leak(lambda: None, steps=3)


def test_a_kept_tensor_per_step_leaks_host_memory_and_a_clean_step_does_not() -> None:
    torch.manual_seed(0)
    kept = []
    assert_no_leak(_cpu_step(), steps=12)
    with pytest.raises(AssertionError, match="resident host memory"):
        assert_no_leak(lambda: kept.append(torch.ones(1024, 1024)), steps=12)  # 4 MiB a step


@pytest.mark.slow
def test_the_example_ci_test_passes_through_the_pytest_plugin(tmp_path: Path) -> None:
    shutil.copy(ROOT / "docs" / "examples" / "test_step_hygiene.py", tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "gpudoctor.testing", "-p", "no:cacheprovider",
                          "test_step_hygiene.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=280, check=False)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "4 passed" in out.stdout
