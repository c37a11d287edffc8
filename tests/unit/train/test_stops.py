"""Early stops say why: a skip streak of NaN losses raises; SIGTERM saves and returns cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from gpudoctor.train import NonFiniteLossError, RobustConfig, Trainer
from gpudoctor.train.stops import TermSignal

from helpers_train import cpu_config, tiny_loader, tiny_model

REPO = Path(__file__).resolve().parents[3]


class _AlwaysNan(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = tiny_model(dropout=0.0)

    def forward(self, x):
        return self.inner(x) * float("nan")


class _NanFrom(nn.Module):
    """Finite outputs for the first ``good`` calls, NaN after."""

    def __init__(self, good: int) -> None:
        super().__init__()
        self.inner, self.good, self.calls = tiny_model(dropout=0.0), good, 0

    def forward(self, x):
        self.calls += 1
        out = self.inner(x)
        return out if self.calls <= self.good else out * float("nan")


def _fit(model, cfg, n):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    return Trainer(model, opt, nn.CrossEntropyLoss(), config=cfg).fit(tiny_loader(n=n), epochs=1)


def test_persistent_nan_under_skip_raises_naming_the_streak_and_what_to_check():
    # 100 steps planned, progress bar off (cpu_debug): the old engine returned after step 9 with
    # stopped_reason set and printed nothing, so a script exited 0 having trained nothing.
    with pytest.raises(NonFiniteLossError) as info:
        _fit(_AlwaysNan(), cpu_config(robust=RobustConfig(nonfinite="skip")), n=800)
    msg = str(info.value)
    assert "10 consecutive steps were skipped" in msg and "from step 0 to step 9" in msg
    for hint in ("inputs", "learning rate", "fp16", "overflow"):
        assert hint in msg


def test_skip_streak_counts_from_the_first_bad_step_after_good_ones():
    with pytest.raises(NonFiniteLossError, match="4 consecutive steps were skipped.*from step 5 to step 8"):
        _fit(_NanFrom(good=5), cpu_config(robust=RobustConfig(nonfinite="skip", max_skips=4)), n=800)


def test_term_signal_sets_a_flag_and_puts_the_previous_handler_back():
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda s, f: seen.append(s))
    try:
        with TermSignal() as term:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(100):  # delivered between bytecodes of the main thread
                if term.received:
                    break
                time.sleep(0.01)
            assert term.received and not seen
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100):
            if seen:
                break
            time.sleep(0.01)
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_term_signal_is_not_installed_off_the_main_thread():
    before = signal.getsignal(signal.SIGTERM)
    inside = []

    def body():
        with TermSignal():
            inside.append(signal.getsignal(signal.SIGTERM))

    t = threading.Thread(target=body)
    t.start()
    t.join(30)
    assert inside == [before] and signal.getsignal(signal.SIGTERM) is before


_SCRIPT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    from gpudoctor.train import CheckpointConfig, Trainer, presets

    folder, marker = Path(sys.argv[1]), Path(sys.argv[2])

    class Slow(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 3)
            self.calls = 0
        def forward(self, x):
            self.calls += 1
            if self.calls == 3:
                marker.write_text("training")  # the signal arrives mid-run, after real steps
            time.sleep(0.05)
            return self.lin(x)

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(80000, 8), torch.randint(0, 3, (80000,)))
    model = Slow()
    cfg = presets.cpu_debug().replace(checkpoint=CheckpointConfig(dir=str(folder)))
    result = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.05), nn.CrossEntropyLoss(),
                     config=cfg).fit(DataLoader(data, batch_size=8), epochs=1)
    print("RESULT", result.steps, result.stopped_reason, flush=True)
""")


def test_sigterm_saves_the_last_step_and_exits_cleanly(tmp_path):
    script, folder, marker = tmp_path / "train.py", tmp_path / "ckpt", tmp_path / "marker"
    script.write_text(_SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, str(script), str(folder), str(marker)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), proc.communicate(timeout=60)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    line = next(x for x in out.splitlines() if x.startswith("RESULT"))
    steps = int(line.split()[1])
    assert 0 < steps < 10000 and "SIGTERM" in line  # stopped early, not at the end of the epoch
    saved = sorted(p.name for p in folder.glob("step-*.pt"))
    assert saved[-1] == f"step-{steps:08d}.pt"  # the last step trained is the one saved
    assert "SIGTERM" in err and saved[-1] in err and "again to resume" in err
    ckpt = torch.load(folder / saved[-1], weights_only=True)
    assert ckpt["progress"]["step"] == steps
