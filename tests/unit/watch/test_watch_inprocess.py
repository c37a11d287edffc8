"""``gpudoctor.watch``: the probes in the current process, a normal run directory, clean removal."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import gpudoctor
from gpudoctor.collectors.inprocess import wrappers_in_place
from gpudoctor.collectors.instrument.state import S
from gpudoctor.errors import GpuDoctorUserError
from gpudoctor.records.rundir import load_run

ROOT = Path(__file__).resolve().parents[3]


class SlowData(Dataset):
    """Each sample costs ``delay_s`` of host time in the main process: a planted loader problem."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int):
        if self.delay_s:
            time.sleep(self.delay_s)
        return torch.randn(32), i % 4


def _train(loader: DataLoader, max_steps: int) -> int:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    done = 0
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        done += 1
        if done == max_steps:
            break
    return done


def test_watch_names_a_planted_slow_dataloader_and_leaves_a_run_dir_diagnose_reads(tmp_path: Path) -> None:
    loader = DataLoader(SlowData(0.002), batch_size=16)
    with gpudoctor.watch(steps=20, run_dir=tmp_path / "run", quiet=True) as w:
        done = _train(loader, max_steps=30)
    assert done == 30  # the loop went on after the observed steps
    assert w.status == "stopped"
    assert wrappers_in_place() == []  # every patched attribute is back
    assert not S.installed
    run = load_run(w.run_dir)
    assert [s.step for s in run.steps[0]] == list(range(20))
    assert run.manifest.status == "stopped" and run.manifest.steps_recorded == (20,)
    assert 0 in run.configs and run.configs[0].loaders[0].num_workers == 0
    assert 0 in run.windows  # the profiler window ran in this process
    assert run.steps[0][-1].data_wait_ms > 10  # 16 samples x 2 ms
    codes = [f.code for f in w.findings]
    assert codes[0] == "GD-RUN-DATALOADER", codes
    # the CLI reads the same directory and finds the same thing
    out = subprocess.run([sys.executable, "-m", "gpudoctor", "diagnose", str(w.run_dir), "--json"],
                         capture_output=True, text=True, timeout=120, check=False,
                         env={**__import__("os").environ, "PYTHONPATH": str(ROOT / "src")})
    assert out.returncode in (0, 1), out.stderr
    assert '"GD-RUN-DATALOADER"' in out.stdout


def test_a_block_shorter_than_steps_completes_and_an_exception_passes_through(tmp_path: Path) -> None:
    loader = DataLoader(SlowData(0.0), batch_size=8)
    with gpudoctor.watch(steps=50, run_dir=tmp_path / "short", profile=False, sample=False, quiet=True) as w:
        _train(loader, max_steps=7)
    assert w.status == "completed"
    assert load_run(w.run_dir).manifest.steps_recorded == (7,)
    assert wrappers_in_place() == []

    with pytest.raises(ZeroDivisionError):
        with gpudoctor.watch(steps=50, run_dir=tmp_path / "boom", profile=False, sample=False, quiet=True) as w2:
            _train(loader, max_steps=3)
            1 / 0  # noqa: B018 - the user's own error
    assert w2.status == "crashed"
    with pytest.raises(KeyboardInterrupt):
        with gpudoctor.watch(steps=50, run_dir=tmp_path / "ctrlc", profile=False, sample=False, quiet=True) as w3:
            _train(loader, max_steps=2)
            raise KeyboardInterrupt  # the notebook's interrupt button
    assert w3.status == "interrupted" and load_run(w3.run_dir).manifest.status == "interrupted"
    manifest = load_run(w2.run_dir).manifest
    assert manifest.status == "crashed" and "ZeroDivisionError" in manifest.error
    assert wrappers_in_place() == []


def test_watch_refuses_to_nest_and_to_overwrite_a_foreign_directory(tmp_path: Path) -> None:
    with gpudoctor.watch(steps=5, run_dir=tmp_path / "outer", profile=False, sample=False, quiet=True):
        with pytest.raises(GpuDoctorUserError, match="already observing"):
            gpudoctor.watch(steps=5, run_dir=tmp_path / "inner").__enter__()
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "model.pt").write_bytes(b"x")
    with pytest.raises(GpuDoctorUserError, match="not a gpudoctor run"):
        gpudoctor.watch(steps=5, run_dir=theirs).__enter__()
    assert (theirs / "model.pt").read_bytes() == b"x"
    with pytest.raises(GpuDoctorUserError, match="at least 1"):
        gpudoctor.watch(steps=0, run_dir=tmp_path / "zero")


def test_report_is_rich_text_in_a_terminal_and_html_in_a_notebook(tmp_path: Path) -> None:
    from rich.console import Console

    loader = DataLoader(SlowData(0.002), batch_size=16)
    with gpudoctor.watch(steps=12, run_dir=tmp_path / "r", sample=False, quiet=True) as w:
        _train(loader, max_steps=12)
    buf = io.StringIO()
    w.report(console=Console(file=buf, width=100))
    text = buf.getvalue()
    assert "GD-RUN-DATALOADER" in text and "Verdict" in text
    page = w._repr_html_()
    assert page.startswith("<iframe") and "GD-RUN-DATALOADER" in page
    path = w.write_report()
    assert path == w.run_dir / "report.html" and "GD-RUN-DATALOADER" in path.read_text(encoding="utf-8")


def test_results_before_the_end_say_so(tmp_path: Path) -> None:
    w = gpudoctor.watch(steps=3, run_dir=tmp_path / "early", profile=False, sample=False, quiet=True)
    with w:
        patched = wrappers_in_place()  # it sees the wrappers go in (so "[]" elsewhere means "out")
        assert {"Tensor.item", "torch.autograd.backward", "torch.compile"} <= set(patched), patched
        assert any(p.endswith("_BaseDataLoaderIter.__next__") for p in patched), patched
        assert "observing" in w._repr_html_()
        with pytest.raises(RuntimeError, match="not ended"):
            _ = w.findings


def test_import_gpudoctor_and_its_watch_attribute_load_no_torch() -> None:
    code = ("import sys, gpudoctor; gpudoctor.watch; "
            "print(sorted(m for m in ('torch', 'pynvml') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_the_notebook_example_runs_and_names_the_loader(tmp_path: Path) -> None:
    script = ROOT / "docs" / "examples" / "watch_notebook.py"
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "nb")], capture_output=True,
                         text=True, timeout=240, check=False, cwd=tmp_path,
                         env={**__import__("os").environ, "PYTHONPATH": str(ROOT / "src")})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "trained 40 steps; observed stopped" in out.stdout
    assert "GD-RUN-DATALOADER" in out.stdout.splitlines()[1]  # the first finding printed
    assert (tmp_path / "nb" / "steps-rank0.jsonl").is_file()


def test_what_the_script_adds_to_torch_meanwhile_stays(tmp_path: Path) -> None:
    marker = object()
    loader = DataLoader(SlowData(0.0), batch_size=8)
    try:
        with gpudoctor.watch(steps=3, run_dir=tmp_path / "w", profile=False, sample=False, quiet=True):
            torch._gpudoctor_test_attr = marker  # like torch._dynamo appearing at a first torch.compile
            _train(loader, max_steps=5)
        assert torch._gpudoctor_test_attr is marker
    finally:
        del torch._gpudoctor_test_attr


WATCHED_SCRIPT = """
import torch, gpudoctor
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with gpudoctor.watch(steps=5) as w:
    for _ in range(30):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
print("STATUS", w.status, w.findings)
"""


def test_under_gpudoctor_run_the_watch_leaves_the_observing_to_run(tmp_path: Path) -> None:
    import os

    (tmp_path / "train.py").write_text(WATCHED_SCRIPT, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUDOCTOR_")}
    env["PYTHONPATH"] = str(ROOT / "src")
    out = subprocess.run([sys.executable, "-m", "gpudoctor", "run", "--full", "--no-profile", "--out", "r",
                          "python", "train.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert "gpudoctor.watch does nothing under gpudoctor run" in out.stderr, out.stderr[-2000:]
    assert "STATUS delegated []" in out.stderr + out.stdout
    assert len(load_run(tmp_path / "r").steps[0]) == 30  # run observed every step itself
