"""lint's file handling: FIFOs skipped, ``--fix`` atomic and faithful to encoding and line endings,
an unwritable file reported while the others are fixed, stdin, ``--diff``, ``--exit-zero``,
output formats, ``[tool.gpudoctor.lint]`` and the project's declared torch floor."""

from __future__ import annotations

import io
import json
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gpudoctor.errors import GpuDoctorUserError
from typer.testing import CliRunner

from gpudoctor.cli.app import app
from gpudoctor.lint import engine
from gpudoctor.lint.config import find_config
from gpudoctor.lint.engine import run_lint

runner = CliRunner()
FIXABLE = "import torch\nopt = torch.optim.SGD([], lr=0.1)\nopt.zero_grad(set_to_none=False)\n"
FIXED = FIXABLE.replace("set_to_none=False", "")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_named_py_is_skipped_not_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.py")  # reading it would block forever
    (tmp_path / "ok.py").write_text("import torch\n", encoding="utf-8")
    report = run_lint([tmp_path]).report
    assert report.files_checked == 1 and report.violations == ()
    with pytest.raises(GpuDoctorUserError, match="not a regular file"):  # named explicitly: an error (issue 36)
        run_lint([tmp_path / "pipe.py"])


@pytest.mark.parametrize("newline", ["\r\n", "\n", "\r"])
def test_fix_keeps_line_endings(tmp_path: Path, newline: str) -> None:
    target = tmp_path / "t.py"
    target.write_bytes(FIXABLE.replace("\n", newline).encode())
    assert run_lint([target], fix=True).report.fixed == 1
    assert target.read_bytes() == FIXED.replace("\n", newline).encode()


def test_fix_keeps_encoding_cookie_and_bom(tmp_path: Path) -> None:
    latin = tmp_path / "latin.py"
    latin.write_bytes(("# -*- coding: latin-1 -*-\n# caf\u00e9\n" + FIXABLE).encode("latin-1"))
    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbf" + ("# \u00fc\n" + FIXABLE).encode())
    assert run_lint([latin, bom], fix=True).report.fixed == 2
    assert latin.read_bytes() == ("# -*- coding: latin-1 -*-\n# caf\u00e9\n" + FIXED).encode("latin-1")
    assert bom.read_bytes() == b"\xef\xbb\xbf" + ("# \u00fc\n" + FIXED).encode()


def test_fix_is_atomic_and_keeps_mode(tmp_path: Path) -> None:
    target = tmp_path / "t.py"
    target.write_text(FIXABLE, encoding="utf-8")
    os.chmod(target, 0o640)
    before = target.stat().st_ino
    run_lint([target], fix=True)
    assert target.stat().st_ino != before  # replaced by rename, never truncated in place
    assert oct(target.stat().st_mode & 0o777) == oct(0o640)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.py"]  # no temporary left


def test_failed_rename_leaves_the_original_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "t.py"
    target.write_text(FIXABLE, encoding="utf-8")

    def fail(*_args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    report = run_lint([target], fix=True).report
    assert target.read_text(encoding="utf-8") == FIXABLE
    assert [v.code for v in report.violations][:1] == ["E902"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.py"]


def test_unwritable_file_is_reported_and_the_others_are_fixed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = [tmp_path / f"{name}.py" for name in ("a", "b", "c")]
    for file in files:
        file.write_text(FIXABLE, encoding="utf-8")
    real = engine.write_atomic

    def refuse_b(path, data):
        if path.name == "b.py":
            raise PermissionError(13, "Permission denied", str(path))
        real(path, data)

    monkeypatch.setattr(engine, "write_atomic", refuse_b)
    run = run_lint(files, fix=True)
    assert [f.read_text(encoding="utf-8") == FIXED for f in files] == [True, False, True]
    assert run.report.fixed == 2
    assert [(Path(v.path).name, v.code) for v in run.report.violations if v.code == "E902"] == [("b.py", "E902")]
    from gpudoctor.lint import render

    assert "1 file could not be written (E902)" in render(run.report, "text")


def test_diff_writes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "t.py"
    target.write_text(FIXABLE, encoding="utf-8")
    result = runner.invoke(app, ["lint", "--diff", "--isolated", str(target)])
    assert "-opt.zero_grad(set_to_none=False)" in result.stdout and "+opt.zero_grad()" in result.stdout
    assert target.read_text(encoding="utf-8") == FIXABLE


def test_stdin_with_filename_exit_zero_and_formats() -> None:
    source = "import torch\nm = torch.nn.DataParallel(torch.nn.Linear(2, 2))\nm(1).sum().backward()\n"
    result = runner.invoke(app, ["lint", "-", "--stdin-filename", "pkg/train.py", "--isolated"], input=source)
    assert result.exit_code == 1
    assert result.stdout.startswith("pkg/train.py:2:5 GD401 ")
    zero = runner.invoke(app, ["lint", "-", "--exit-zero", "--isolated", "--output-format", "json"], input=source)
    assert zero.exit_code == 0 and json.loads(zero.stdout)["violations"][0]["code"] == "GD401"
    gh = runner.invoke(app, ["lint", "-", "--stdin-filename", "t.py", "--isolated", "--output-format", "github"],
                       input=source)
    assert gh.stdout.startswith("::warning title=gpudoctor GD401,file=t.py,line=2,col=5::")
    junit = runner.invoke(app, ["lint", "-", "--isolated", "--output-format", "junit"], input=source)
    root = ET.fromstring(junit.stdout)
    assert root.get("failures") == "1" and root.find(".//failure").get("type") == "GD401"


def test_stdin_fix_prints_fixed_source() -> None:
    result = runner.invoke(app, ["lint", "-", "--fix", "--isolated"], input=FIXABLE)
    assert result.stdout == FIXED


def test_pyproject_table_select_ignore_per_file_exclude(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.gpudoctor.lint]\nignore = ["GD204"]\nexclude = ["vendor"]\n'
        'per-file-ignores = {"tests/*" = ["GD401"]}\n', encoding="utf-8")
    dp = "import torch\nm = torch.nn.DataParallel(torch.nn.Linear(2, 2))\nm(1).sum().backward()\n"
    for rel, text in {"a.py": FIXABLE, "tests/t.py": dp, "train.py": dp, "vendor/v.py": dp}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    report = run_lint(["."], config=find_config()).report
    assert report.files_checked == 3  # vendor/ excluded
    assert [(v.path, v.code) for v in report.violations] == [("train.py", "GD401")]
    with pytest.raises(Exception, match="unknown key"):
        (tmp_path / "pyproject.toml").write_text('[tool.gpudoctor.lint]\nselct = ["GD"]\n', encoding="utf-8")
        find_config()


@pytest.mark.parametrize(("declared", "fires"), [("torch>=2.6\n", False), ("torch >= 2.7.1; sys_platform == 'linux'\n", False),
                                                  ("torch>=1.11.0\n", True), ("torch<2.6\n", True), ("torch\n", True),
                                                  (None, True)])
def test_torch_load_is_version_aware(tmp_path: Path, declared: str | None, fires: bool) -> None:
    project = tmp_path / "proj"
    (project / "src").mkdir(parents=True)
    (project / ".git").mkdir()
    if declared is not None:
        (project / "requirements.txt").write_text(f"numpy\n{declared}", encoding="utf-8")
    (project / "src" / "load.py").write_text(
        "import torch\nsd = torch.load('a.pt')\nbad = torch.load('b.pt', weights_only=False)\n", encoding="utf-8")
    lines = [v.line for v in run_lint([project], select=["GD601"]).report.violations]
    assert lines == ([2, 3] if fires else [3])


@pytest.mark.parametrize(("declared", "fires"), [("torch==1.13.1\n", False), ("torch>=1.10,<2.4\n", False),
                                                  ("torch<=2.3.1\n", False), ("torch==2.4.0\n", True),
                                                  ("torch>=1.13\n", True), ("torch==1.13.*\n", True),
                                                  ("torch\n", True), (None, True)])
def test_deprecated_amp_is_silent_below_a_pinned_torch(tmp_path: Path, declared: str | None, fires: bool) -> None:
    """torch.cuda.amp is deprecated from 2.4: a project whose every declared torch is older gets no
    FutureWarning and is not told to migrate (held-out run: a repository pinning torch==1.13.1)."""
    (tmp_path / ".git").mkdir()
    if declared is not None:
        (tmp_path / "requirements.txt").write_text(f"timm\n{declared}", encoding="utf-8")
    (tmp_path / "step.py").write_text(
        "import torch\nwith torch.cuda.amp.autocast():\n    pass\n", encoding="utf-8")
    lines = [v.line for v in run_lint([tmp_path], select=["GD301"]).report.violations]
    assert lines == ([2] if fires else [])


def test_pyproject_dependencies_and_target_torch(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text('[project]\ndependencies = ["torch>=2.6", "numpy"]\n', encoding="utf-8")
    (tmp_path / "t.py").write_text("import torch\nsd = torch.load('a.pt')\n", encoding="utf-8")
    assert run_lint([tmp_path], select=["GD601"]).report.violations == ()
    from gpudoctor.lint.config import LintConfig

    old = LintConfig(root=tmp_path, target_torch=(2, 1))
    assert len(run_lint([tmp_path], select=["GD601"], config=old).report.violations) == 1


def test_lint_and_explain_run_without_torch(tmp_path: Path) -> None:
    """A pre-commit environment has no torch: lint and explain must not import it (or CUDA/NVML)."""
    import subprocess

    (tmp_path / "t.py").write_text(FIXABLE, encoding="utf-8")
    (tmp_path / "log.txt").write_text("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n", encoding="utf-8")
    blocker = ("import sys\nclass B:\n    def find_spec(self, name, path=None, target=None):\n"
               "        if name.split('.')[0] in ('torch', 'pynvml', 'numpy'):\n"
               "            raise ImportError('blocked: ' + name)\nsys.meta_path.insert(0, B())\n"
               "from gpudoctor.cli.app import main\nsys.argv = ['gpudoctor'] + sys.argv[1:]\nmain()\n")
    env = {**os.environ, "PYTHONPATH": str(Path(engine.__file__).resolve().parents[2])}
    lint = subprocess.run([sys.executable, "-c", blocker, "lint", "--isolated", str(tmp_path / "t.py")],
                          capture_output=True, text=True, env=env, timeout=60)
    assert lint.returncode == 1 and "GD204" in lint.stdout, lint.stderr
    explain = subprocess.run([sys.executable, "-c", blocker, "explain", str(tmp_path / "log.txt")],
                             capture_output=True, text=True, env=env, timeout=60)
    assert explain.returncode in (0, 1) and "blocked" not in explain.stderr, explain.stderr
