"""Which files declare the project's torch (project.py): a ``setup.py`` is a packaging script only
when it calls ``setup(...)`` from setuptools/distutils, and an ``import torch`` line in it declares
nothing (second held-out run, benchmarks/results/lint_precision_heldout2.md: a module named
``setup.py`` inside a package hid the repository's ``torch==2.0.0`` pin)."""

from __future__ import annotations

from pathlib import Path

from gpudoctor.lint.engine import run_lint
from gpudoctor.lint.project import torch_ceiling, torch_floor

AMP = "import torch\nwith torch.cuda.amp.autocast():\n    pass\n"
MODULE_NAMED_SETUP = (
    "import torch\nimport torch.backends.cudnn as cudnn\n\n\n"
    "def setup_and_build_model(args):\n    cudnn.benchmark = True\n    return torch.nn.Linear(2, 2)\n"
)
PACKAGING_WITH_TORCH_IMPORT = (
    "import torch\nfrom setuptools import setup\nfrom torch.utils.cpp_extension import BuildExtension\n\n"
    "setup(name='ops', cmdclass={'build_ext': BuildExtension})\n"
)


def _tree(root: Path, inner_setup: str) -> Path:
    (root / ".git").mkdir()
    (root / "requirements.txt").write_text("torch==2.0.0\ntorchvision==0.15.0\n", encoding="utf-8")
    inner = root / "pkg" / "eval"
    inner.mkdir(parents=True)
    (inner / "setup.py").write_text(inner_setup, encoding="utf-8")
    (inner / "knn.py").write_text(AMP, encoding="utf-8")
    return inner / "knn.py"


def test_a_module_named_setup_py_declares_nothing(tmp_path: Path) -> None:
    script = _tree(tmp_path, MODULE_NAMED_SETUP)
    assert torch_floor(str(script)) == (2, 0, 0)
    assert torch_ceiling(str(script)) == (2, 0, 0, 1)
    assert run_lint([tmp_path], select=["GD301"]).report.violations == ()


def test_import_torch_in_a_packaging_setup_py_is_not_a_requirement(tmp_path: Path) -> None:
    script = _tree(tmp_path, PACKAGING_WITH_TORCH_IMPORT)
    assert torch_ceiling(str(script)) == (2, 0, 0, 1)
    assert run_lint([tmp_path], select=["GD301"]).report.violations == ()


def test_a_packaging_setup_py_that_requires_torch_still_counts(tmp_path: Path) -> None:
    script = _tree(tmp_path, "from setuptools import setup\n\nsetup(name='x', install_requires=['torch>=2.4'])\n")
    assert torch_floor(str(script)) == (2, 4)
    assert torch_ceiling(str(script)) is None
    assert [v.line for v in run_lint([tmp_path], select=["GD301"]).report.violations] == [2]
