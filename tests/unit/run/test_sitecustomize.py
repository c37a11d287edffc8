"""The injected ``sitecustomize``: inert without ``GPUDOCTOR_RUN_DIR``, and it chains."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpudoctor.collectors.instrument import SITE_DIR

SRC = Path(__file__).resolve().parents[3] / "src"

PROBE = (
    "import sys, torch; "
    "print('wrapped' if hasattr(torch.Tensor.to, '__wrapped__') else 'plain', "
    "'gpudoctor' in sys.modules, sep=',')"
)


def _python(code: str, *, pythonpath: list[str], **extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUDOCTOR_")}
    env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    env["GPUDOCTOR_PKG_ROOT"] = str(SRC)
    env.update(extra)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def test_inert_without_run_dir() -> None:
    result = _python(PROBE, pythonpath=[str(SITE_DIR)])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "plain,False"


def test_active_with_run_dir(tmp_path: Path) -> None:
    result = _python(PROBE, pythonpath=[str(SITE_DIR)], GPUDOCTOR_RUN_DIR=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "wrapped,True"
    # no optimizer step: no records; only the stack-dump file every probed process opens (the
    # parent `gpudoctor run` renames it by rank or removes it when empty)
    assert all(p.name.startswith("stacks-pid") for p in tmp_path.iterdir())


def test_no_torch_import_means_no_probe_cost(tmp_path: Path) -> None:
    result = _python("import sys; print('torch' in sys.modules)", pythonpath=[str(SITE_DIR)],
                     GPUDOCTOR_RUN_DIR=str(tmp_path))
    assert result.stdout.strip() == "False"


def test_chains_to_an_existing_sitecustomize(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIRS_RAN'] = 'yes'\n")
    code = "import os; print(os.environ.get('THEIRS_RAN'))"
    for extra in ({}, {"GPUDOCTOR_RUN_DIR": str(tmp_path)}):
        result = _python(code, pythonpath=[str(SITE_DIR), str(theirs)], **extra)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "yes"


def test_a_broken_chained_sitecustomize_does_not_stop_the_script(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("raise ImportError('their bug')\n")
    result = _python("print('ran')", pythonpath=[str(SITE_DIR), str(theirs)])
    assert result.stdout.strip() == "ran"
    assert "their bug" in result.stderr
