"""``--fix`` rewrites exactly the safe cases: ``fix.in.py`` becomes ``fix.out.py``, and a second
run changes nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpudoctor.lint.engine import lint_paths
from gpudoctor.lint.fix import FIXED_CODES
from gpudoctor.lint.registry import ALL_RULES

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "lint"


def test_fixable_rules_and_fixer_agree() -> None:
    assert sorted(rule.CODE for rule in ALL_RULES if rule.FIXABLE) == sorted(FIXED_CODES)


@pytest.mark.parametrize("code", FIXED_CODES)
def test_fix_rewrites_input_into_expected_output(code: str, tmp_path: Path) -> None:
    target = tmp_path / "script.py"
    shutil.copy(FIXTURES / code / "fix.in.py", target)
    report = lint_paths([target], select=[code], fix=True)
    assert target.read_text(encoding="utf-8") == (FIXTURES / code / "fix.out.py").read_text(encoding="utf-8")
    assert report.fixed > 0
    assert not [v for v in report.violations if v.code == code]
    again = lint_paths([target], select=[code], fix=True)
    assert again.fixed == 0
    assert target.read_text(encoding="utf-8") == (FIXTURES / code / "fix.out.py").read_text(encoding="utf-8")


def test_fix_leaves_unfixable_violations_and_other_code_alone(tmp_path: Path) -> None:
    source = (
        "import torch\n"
        "x = torch.randn(3)\n"
        "x.cuda()  # noqa: GD101\n"
        "model = torch.nn.DataParallel(torch.nn.Linear(2, 2))\n"
        "optimizer.zero_grad(set_to_none=False)\n"
        "model(x).sum().backward()\n"
    )
    target = tmp_path / "t.py"
    target.write_text(source, encoding="utf-8")
    report = lint_paths([target], fix=True)
    assert report.fixed == 1
    assert target.read_text(encoding="utf-8") == source.replace("set_to_none=False", "")
    assert [v.code for v in report.violations] == ["GD401"]


def test_fix_does_not_rewrite_an_import_that_brings_other_names(tmp_path: Path) -> None:
    source = "from torch.cuda.amp import autocast, something_else\nwith autocast():\n    pass\n"
    target = tmp_path / "t.py"
    target.write_text(source, encoding="utf-8")
    lint_paths([target], select=["GD301"], fix=True)
    assert target.read_text(encoding="utf-8").startswith("from torch.cuda.amp import autocast, something_else\n")


def test_fix_handles_aliases_and_leaves_unsafe_forms_reported(tmp_path: Path) -> None:
    source = (
        "import torch as th\n"
        "from torch.cuda import amp\n"
        "from torch.cuda.amp import autocast, something_else\n"
        "from torch.cuda.amp import GradScaler as GS\n"
        "with th.cuda.amp.autocast():\n    pass\n"
        "with amp.autocast():\n    pass\n"
        "with autocast():\n    pass\n"
        "s = GS()\n"
    )
    target = tmp_path / "t.py"
    target.write_text(source, encoding="utf-8")
    report = lint_paths([target], select=["GD301"], fix=True)
    assert target.read_text(encoding="utf-8") == (
        "import torch as th\n"
        "from torch.cuda import amp\n"
        "from torch.cuda.amp import autocast, something_else\n"
        "from torch.amp import GradScaler as GS\n"
        "with th.amp.autocast(\"cuda\"):\n    pass\n"
        "with amp.autocast():\n    pass\n"
        "with autocast():\n    pass\n"
        "s = GS(\"cuda\")\n"
    )
    # what could not be rewritten safely is still reported
    assert [(v.line, v.code) for v in report.violations] == [(3, "GD301"), (7, "GD301"), (9, "GD301")]
