"""``gpudoctor run`` when the script hangs, dies hard, or shares its folder: CPU, the real launcher."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import run_scripts
from cli_runner import env as _env
from cli_runner import gpudoctor

from gpudoctor.records.rundir import load_run



def _write(tmp_path: Path, name: str, text: str) -> None:
    (tmp_path / name).write_text(text, encoding="utf-8")


@pytest.mark.parametrize("hang", ["time.sleep(10**6)", "threading.Event().wait()"])
def test_a_hang_after_step_10_is_stopped_as_a_stall_with_stacks(tmp_path: Path, hang: str) -> None:
    _write(tmp_path, "hang.py", run_scripts.HANG_AFTER_10.format(hang=hang))
    started = time.monotonic()
    result = gpudoctor("run", "--full", "--stall-timeout", "3", "--json", "--out", "rd", "--",
                       sys.executable, "hang.py", cwd=tmp_path)
    assert time.monotonic() - started < 60
    assert result.returncode == 1, result.stderr[-2000:]
    assert "stalled at step 10" in result.stderr
    payload = json.loads(result.stdout)
    manifest = payload["manifest"]
    assert manifest["status"] == "stalled" and "stalled at step 10" in manifest["notes"]
    assert manifest["steps_recorded"] == [10] and manifest["idle_s"] >= 3
    (stall,) = [f for f in payload["findings"] if f["code"] == "GD-RUN-STALL"]
    assert stall["severity"] == "error" and "Stalled at step 10" in stall["title"]
    assert "hang.py:6 in wait_forever" in stall["title"]  # the innermost frame of the user's code
    assert any("hang.py:6 in wait_forever" in line and "hang.py:14 in <module>" in line
               for line in stall["evidence"])
    stacks = (tmp_path / "rd" / "stacks-rank0.txt").read_text()
    assert "most recent call first" in stacks and 'hang.py", line 6 in wait_forever' in stacks
    assert not list((tmp_path / "rd").glob("stacks-pid*"))  # named by rank, empty ones removed


def test_a_hang_ends_within_60_s_of_the_last_step_with_the_defaults(tmp_path: Path) -> None:
    _write(tmp_path, "hang.py", run_scripts.HANG_AFTER_10.format(hang="time.sleep(10**6)"))
    result = gpudoctor("run", "--full", "--json", "--out", "rd", "--", sys.executable, "hang.py", cwd=tmp_path)
    ended = time.time()
    assert result.returncode == 1, result.stderr[-2000:]
    run = load_run(tmp_path / "rd")
    assert run.manifest.status == "stalled" and run.manifest.stall_limit_s == 30.0
    assert ended - run.steps[0][-1].t_end_s < 60
    assert run.stacks[0] and any(f.code == "GD-RUN-STALL" for f in run.findings or ())


def test_ctrl_c_on_a_hung_script_names_the_hang(tmp_path: Path) -> None:
    _write(tmp_path, "hang.py", run_scripts.HANG_AFTER_10.format(hang="threading.Event().wait()"))
    proc = subprocess.Popen([sys.executable, "-m", "gpudoctor", "run", "--full", "--json", "--out", "rd", "--",
                             sys.executable, "hang.py"], cwd=tmp_path, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while "hanging now" not in (tmp_path / "rd" / "stdout.log").read_text() if (tmp_path / "rd" / "stdout.log").exists() else True:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
        time.sleep(11)  # longer than a stuck script's steps take: 10 s
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    payload = json.loads(out)
    assert payload["manifest"]["status"] == "interrupted"
    assert any(n.startswith("interrupted at step 10, ") for n in payload["manifest"]["notes"])
    codes = [f["code"] for f in payload["findings"]]
    assert codes[0] == "GD-RUN-STALL", codes  # not "no problem found"
    assert "wait_forever" in (tmp_path / "rd" / "stacks-rank0.txt").read_text()


@pytest.mark.parametrize("die", ["os.abort()", "os.kill(os.getpid(), signal.SIGKILL)", "ctypes.string_at(0)"])
def test_a_hard_crash_after_30_steps_keeps_the_records(tmp_path: Path, die: str) -> None:
    _write(tmp_path, "die.py", run_scripts.DIE_AFTER_30.format(die=die))
    result = gpudoctor("run", "--full", "--json", "--out", "rd", "--", sys.executable, "die.py", cwd=tmp_path)
    assert result.returncode >= 128, result.stderr[-2000:]
    run = load_run(tmp_path / "rd")
    assert run.manifest.status == "crashed"
    assert len(run.steps[0]) >= 29 and [s.step for s in run.steps[0]] == list(range(len(run.steps[0])))
    if "SIGKILL" not in die:  # faulthandler wrote the fatal error's stack
        assert "Fatal Python error" in run.stacks[0]


def test_out_into_a_folder_with_a_users_files_touches_nothing(tmp_path: Path) -> None:
    _write(tmp_path, "train.py", run_scripts.TRAIN)
    mine = tmp_path / "stdout.log"
    mine.write_text("my own log\n")
    for force in ([], ["--force"]):
        result = gpudoctor("run", "--steps", "8", "--out", ".", *force, "--", sys.executable, "train.py", cwd=tmp_path)
        assert result.returncode == 2 and "holds files that are not a gpudoctor run" in result.stderr
        assert "Traceback" not in result.stderr
    assert mine.read_text() == "my own log\n" and not (tmp_path / "manifest.json").exists()
    result = gpudoctor("run", "--steps", "8", "--out", "train.py", "--", sys.executable, "train.py", cwd=tmp_path)
    assert result.returncode == 2 and "that is a file" in result.stderr and "Traceback" not in result.stderr


def test_out_replaces_an_earlier_run_only_with_force(tmp_path: Path) -> None:
    _write(tmp_path, "train.py", run_scripts.TRAIN)
    args = ("run", "--steps", "8", "--no-profile", "--fail-on", "never", "--out", "rd")
    assert gpudoctor(*args, "--", sys.executable, "train.py", cwd=tmp_path).returncode == 0
    again = gpudoctor(*args, "--", sys.executable, "train.py", cwd=tmp_path)
    assert again.returncode == 2 and "--force" in again.stderr
    forced = gpudoctor(*args, "--force", "--", sys.executable, "train.py", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr[-2000:]
    assert len(load_run(tmp_path / "rd").steps[0]) == 8


def test_a_python_subprocess_of_the_script_is_not_probed(tmp_path: Path) -> None:
    child = run_scripts.TRAIN.replace("range(100)", "range(1)")
    _write(tmp_path, "child.py", child + "\nimport os\nprint('CHILD', sorted(k for k in os.environ if k.startswith('GPUDOCTOR_')), flush=True)\n")
    _write(tmp_path, "parent.py", run_scripts.SUBPROCESS_AFTER_STEPS)
    result = gpudoctor("run", "--full", "--no-profile", "--json", "--fail-on", "never", "--out", "rd", "--",
                       sys.executable, "parent.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "CHILD []" in result.stderr  # gpudoctor left the child's environment
    run = load_run(tmp_path / "rd")
    assert [s.step for s in run.steps[0]] == list(range(6)) and run.manifest.ranks == (0,)


CRASH_OOM = """
import torch
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(5):
    model(torch.randn(8, 8)).sum().backward()
    opt.step()
raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity "
    "of 79.10 GiB of which 1.2 GiB is free. Of the allocated memory 70 GiB is allocated by PyTorch, and "
    "6 GiB is reserved by PyTorch but unallocated.")
"""


def test_a_crash_ends_with_its_explain_entry(tmp_path: Path) -> None:
    _write(tmp_path, "oom.py", CRASH_OOM)
    result = gpudoctor("run", "--full", "--json", "--out", "rd", "--", sys.executable, "oom.py", cwd=tmp_path)
    assert result.returncode == 1
    payload = json.loads(result.stdout)
    assert payload["manifest"]["status"] == "crashed"
    assert payload["explain"]["entry_id"] == "oom-fragmentation"
    text = gpudoctor("run", "--full", "--out", "rd2", "--", sys.executable, "oom.py", cwd=tmp_path)
    assert "the crash, explained (gpudoctor explain rd2/stdout.log)" in text.stdout
    assert "oom-fragmentation" in text.stdout and "expandable_segments" in text.stdout


def test_stuck_before_the_first_step_is_named_with_its_stack(tmp_path: Path) -> None:
    _write(tmp_path, "nostep.py", "import time, torch\ndef load_data():\n    time.sleep(300)\nload_data()\n")
    result = gpudoctor("run", "--first-step-timeout", "15", "--json", "--out", "rd", "--",
                       sys.executable, "nostep.py", cwd=tmp_path)
    assert result.returncode == 1, result.stderr[-2000:]
    payload = json.loads(result.stdout)
    assert payload["manifest"]["status"] == "timeout"
    codes = [f["code"] for f in payload["findings"]]
    assert codes == ["GD-RUN-STALL"], codes
    assert "nostep.py:3 in load_data" in payload["findings"][0]["title"]
