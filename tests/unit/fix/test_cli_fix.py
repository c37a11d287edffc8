"""``gpudoctor fix`` end to end on the CPU: a planted data-loader-bound script, the real launcher."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import fix_scripts
from cli_runner import env, gpudoctor


def _script(tmp_path: Path, text: str = fix_scripts.LOADER_BOUND, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_script_that_does_not_parse_gets_text_advice_and_exit_1(tmp_path: Path) -> None:
    script = _script(tmp_path, "import torch\nfor x in range(3)\n    pass\n")
    result = gpudoctor("fix", "--write", "train.py", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "train.py:2: cannot parse it" in result.stdout and "no patch" in result.stdout
    assert script.read_text(encoding="utf-8") == "import torch\nfor x in range(3)\n    pass\n"
    assert not list(tmp_path.glob("train.py.orig*")) and not (tmp_path / "gpudoctor-runs").exists()


def test_usage_errors(tmp_path: Path) -> None:
    _script(tmp_path)
    assert gpudoctor("fix", "--diff", "--write", "train.py", cwd=tmp_path).returncode == 2
    missing = gpudoctor("fix", "nothere.py", cwd=tmp_path)
    assert missing.returncode == 2 and "not a Python file" in missing.stderr


def test_diff_leaves_the_file_untouched_and_no_measure_write_makes_a_script_that_runs(tmp_path: Path) -> None:
    script = _script(tmp_path)
    result = gpudoctor("fix", "--no-measure", "--json", "--steps", "12", "--out", "rd", "train.py", cwd=tmp_path,
                       timeout=180)
    assert result.returncode == 0, result.stderr
    assert script.read_text(encoding="utf-8") == fix_scripts.LOADER_BOUND  # --diff is the default
    payload = json.loads(result.stdout)  # the script's own output went to stderr
    assert "+    loader = DataLoader(Slow(), batch_size=4, shuffle=True, num_workers=" in payload["diff"]
    (change,) = payload["changes"]
    assert (change["kind"], change["code"], change["kept"], change["verdict"], change["file"]) == (
        "loader", "GD-RUN-DATALOADER", True, None, "train.py")
    assert payload["written"] is None and payload["exit_code"] == 0 and payload["after"] is None
    assert not list(tmp_path.glob("train.py.orig*"))

    (tmp_path / "train.py.orig").write_text("an earlier backup\n", encoding="utf-8")
    result = gpudoctor("fix", "--write", "--no-measure", "--steps", "12", "--out", "rd2", "train.py",
                       cwd=tmp_path, timeout=180)
    assert result.returncode == 0, result.stderr
    fixed = script.read_text(encoding="utf-8")
    assert "GD-RUN-DATALOADER  loader: not measured (--no-measure); applied" in result.stdout
    assert "# gpudoctor fix: GD-RUN-DATALOADER — " in fixed and "persistent_workers=True" in fixed
    assert (tmp_path / "train.py.orig").read_text(encoding="utf-8") == "an earlier backup\n"  # never overwritten
    assert (tmp_path / "train.py.orig.2").read_text(encoding="utf-8") == fix_scripts.LOADER_BOUND
    assert f"the original kept as {Path('train.py.orig.2')}" in result.stdout
    ran = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=env(), capture_output=True, text=True,
                         timeout=180)
    assert ran.returncode == 0 and "END OF SCRIPT" in ran.stdout, ran.stderr


def test_measured_fix_keeps_the_loader_change_that_is_faster(tmp_path: Path) -> None:
    script = _script(tmp_path)
    result = gpudoctor("fix", "--write", "--steps", "24", "--repeats", "3", "--no-profile", "--out", "rd",
                       "train.py", cwd=tmp_path, timeout=400)
    assert result.returncode == 0, result.stderr
    assert "loader: measured gain: +" in result.stdout and "apply it" in result.stdout, result.stdout
    assert "before/after" in result.stdout and "loss, first 10 steps" in result.stdout
    assert "num_workers=1" in script.read_text(encoding="utf-8")  # 2 cores here: one left for training
    assert (tmp_path / "rd" / "fix-1-loader" / "train.py").is_file()  # the measured copy, in the run dir
    assert (tmp_path / "train.py.orig").read_text(encoding="utf-8") == fix_scripts.LOADER_BOUND


def test_a_training_loop_it_cannot_locate_gets_the_prescription_as_text_and_exit_1(tmp_path: Path) -> None:
    # the same loader-bound training, inside a trainer class: the loop iterates a dict's entry
    text = fix_scripts.LOADER_BOUND.replace(
        "def main():\n    torch.manual_seed(0)\n    loader = DataLoader(Slow(), batch_size=4, shuffle=True)\n"
        "    model = torch.nn.Linear(8, 1)\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)\n"
        "    total = 0.0\n    for step, (x, y) in enumerate(loader):\n",
        "class Trainer:\n    def __init__(self):\n"
        "        self.loaders = {\"train\": DataLoader(Slow(), batch_size=4, shuffle=True)}\n"
        "        self.model = torch.nn.Linear(8, 1)\n"
        "        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)\n\n"
        "    def fit(self):\n        model, optimizer, total = self.model, self.opt, 0.0\n"
        "        for x, y in self.loaders[\"train\"]:\n",
    ).replace("\n        optimizer.zero_grad()", "\n            optimizer.zero_grad()").replace(
        "\n        loss = torch", "\n            loss = torch").replace("\n        loss.backward()", "\n            loss.backward()").replace(
        "\n        optimizer.step()", "\n            optimizer.step()").replace(
        "\n        time.sleep(0.012)", "\n            time.sleep(0.012)").replace(
        "\n        total += float(loss)", "\n            total += float(loss)").replace(
        '    print("END OF SCRIPT", total)', '        print("END OF SCRIPT", total)\n\n\ndef main():\n    Trainer().fit()')
    compile(text, "train.py", "exec")
    script = _script(tmp_path, text)
    result = gpudoctor("fix", "--write", "--steps", "12", "--out", "rd", "train.py", cwd=tmp_path, timeout=180)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "GD-RUN-DATALOADER: no patch (loader: the training loop does not iterate a named loader)" in result.stdout
    assert "num_workers" in result.stdout  # the finding's own fix, as text
    assert script.read_text(encoding="utf-8") == text and not list(tmp_path.glob("train.py.orig*"))


def test_a_loop_in_a_module_of_the_project_is_patched_there_with_its_own_backup(tmp_path: Path) -> None:
    script = _script(tmp_path, fix_scripts.TRAINER_SCRIPT)
    (tmp_path / "slowpkg").mkdir()
    (tmp_path / "slowpkg" / "__init__.py").write_text("", encoding="utf-8")
    module = tmp_path / "slowpkg" / "fitter.py"
    module.write_text(fix_scripts.TRAINER_MODULE, encoding="utf-8")
    result = gpudoctor("fix", "--write", "--no-measure", "--steps", "12", "--out", "rd", "train.py", cwd=tmp_path,
                       timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "+++ slowpkg/fitter.py (fixed)" in result.stdout and "wrote " in result.stdout
    fixed = module.read_text(encoding="utf-8")
    assert "# gpudoctor fix: GD-RUN-DATALOADER — " in fixed and "num_workers=" in fixed
    assert (tmp_path / "slowpkg" / "fitter.py.orig").read_text(encoding="utf-8") == fix_scripts.TRAINER_MODULE
    assert script.read_text(encoding="utf-8") == fix_scripts.TRAINER_SCRIPT
    assert not list(tmp_path.glob("train.py.orig*"))
    ran = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=env(), capture_output=True, text=True,
                         timeout=180)
    assert ran.returncode == 0 and "END OF SCRIPT" in ran.stdout, ran.stderr


ARGPARSE_SCRIPT = Path(__file__).resolve().parents[2] / "fixtures" / "fix" / "argparse_loader.py"


def test_a_flag_on_the_command_line_is_measured_and_shown_with_the_new_value(tmp_path: Path) -> None:
    # the case: the workers come from -j, and the command line sets -j itself
    from gpudoctor.records.rundir import load_run

    text = ARGPARSE_SCRIPT.read_text(encoding="utf-8")
    script = _script(tmp_path, text)
    result = gpudoctor("fix", "--steps", "10", "--repeats", "2", "--no-profile", "--json", "--out", "rd", "train.py",
                       "--", "-j", "0", "--steps", "64", cwd=tmp_path, timeout=400)
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert script.read_text(encoding="utf-8") == text  # --diff: nothing written
    assert payload["options"] == [{"flags": ["-j", "--workers"], "default": "1", "was": "0", "set": "-j 0",
                                   "run_with": "-j 1"}]  # 2 cores here: one worker, one core left for training
    assert payload["command"] == ["python", "train.py", "-j", "1", "--steps", "64"]
    assert '+parser.add_argument("-j", "--workers", default=1, type=int, metavar="N",' in payload["diff"]
    assert "num_workers=args.workers," in payload["diff"]  # the call still reads the flag
    # the original ran with the user's command line, the patched copy with the new value
    assert load_run(tmp_path / "rd" / "baseline").manifest.command[-4:] == ("-j", "0", "--steps", "64")
    tried = sorted((tmp_path / "rd" / "fix-1-loader").glob("try*"))
    assert tried and all(load_run(t).manifest.command[1:] == ("rd/fix-1-loader/train.py", "-j", "1", "--steps", "64")
                         for t in tried)
    assert all(load_run(b).manifest.command[-4:] == ("-j", "0", "--steps", "64")
               for b in (tmp_path / "rd" / "fix-1-loader").glob("baseline*"))
