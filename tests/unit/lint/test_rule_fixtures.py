"""Every rule is tested by its fixture files alone: ``tests/fixtures/lint/<CODE>/``.

``bad.py`` must produce exactly ``expected.txt`` (``line:col CODE message``), ``good.py`` (which
holds correct code and the cases a static checker cannot decide) must produce nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpudoctor.lint.config import LintConfig
from gpudoctor.lint.engine import lint_source, lint_text
from gpudoctor.lint.shell import lint_shell
from gpudoctor.lint.registry import ALL_RULES, RULES_BY_CODE, select_rules
from gpudoctor.lint.rules.base import validate_rule

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "lint"
HEADER = (
    "import os\nimport time\nimport torch\nimport torch.distributed as dist\nimport torch.nn as nn\n"
    "from torch.nn.parallel import DistributedDataParallel as DDP\n"
    "from torch.utils.data import DataLoader, Dataset\n"
)
CASES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


def _run(path: Path, code: str) -> list[str]:
    found = lint_text(path.read_text(encoding="utf-8"), str(path), select_rules([code]), LintConfig())
    return [f"{v.line}:{v.col} {v.code} {v.message}" for v in found]


def _fixture(code: str, kind: str) -> Path:
    """``bad.py``/``good.py``, or ``bad.sh``/``good.sh`` for a shell-script rule."""
    suffix = getattr(RULES_BY_CODE[code], "KIND", "py")
    return FIXTURES / code / f"{kind}.{suffix}"


@pytest.mark.parametrize("code", CASES)
def test_bad_fixture_matches_expected(code: str) -> None:
    expected = (FIXTURES / code / "expected.txt").read_text(encoding="utf-8").splitlines()
    assert expected, f"{code}/expected.txt is empty: a bad fixture must trigger the rule"
    assert _run(_fixture(code, "bad"), code) == expected


@pytest.mark.parametrize("code", CASES)
def test_good_fixture_is_silent(code: str) -> None:
    assert _run(_fixture(code, "good"), code) == []


def test_every_rule_has_fixtures_and_every_fixture_a_rule() -> None:
    assert sorted(RULES_BY_CODE) == CASES


def test_codes_are_unique_and_grouped_by_hundreds() -> None:
    codes = [rule.CODE for rule in ALL_RULES]
    assert len(codes) == len(set(codes))
    names = [rule.NAME for rule in ALL_RULES]
    assert len(names) == len(set(names))
    for rule in ALL_RULES:
        assert re.fullmatch(r"GD[1-69]\d\d", rule.CODE), rule.CODE


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.CODE)
def test_rule_module_is_complete_and_named_after_its_code(rule) -> None:
    validate_rule(rule)
    module_file = rule.__name__.rsplit(".", 1)[-1]
    assert module_file.startswith(rule.CODE.lower() + "_"), module_file
    assert rule.MESSAGE and len(rule.RATIONALE) > 80
    # the documented examples behave as documented
    if getattr(rule, "KIND", "py") == "sh":
        assert lint_shell(rule.BAD, "doc.sh", [rule]), f"{rule.CODE}: the BAD example does not fire"
        assert not lint_shell(rule.GOOD, "doc.sh", [rule]), f"{rule.CODE}: the GOOD example fires"
        return
    bad = lint_source(HEADER + _prelude(rule.CODE) + rule.BAD, "doc.py", [rule])
    assert any(v.code == rule.CODE for v in bad), f"{rule.CODE}: the BAD example does not fire"
    good = lint_source(HEADER + _prelude(rule.CODE) + rule.GOOD, "doc.py", [rule])
    assert not [v for v in good if v.code == rule.CODE], f"{rule.CODE}: the GOOD example fires"


def _prelude(code: str) -> str:
    """Context the short doc examples assume (a model, a loop, a CUDA device, a GradScaler)."""
    return {
        "GD101": "device = torch.device('cuda')\nmodel = nn.Linear(3, 3)\n",
        "GD103": "",
        "GD201": "model = nn.Linear(3, 1)\ncriterion = nn.MSELoss()\n",
        "GD202": "model = nn.Linear(3, 1)\n",
        "GD203": "",
        "GD302": "for x, y in loader:\n    pass\nscaler = torch.amp.GradScaler('cuda')\n",
        "GD303": "scaler = torch.amp.GradScaler('cuda')\n",
        "GD501": "model = nn.Linear(3, 3).cuda()\ncriterion = nn.MSELoss()\n",
        "GD503": "for x in loader:\n    x.sum().backward()\n    optimizer.step()\n    optimizer.zero_grad()\n",
        "GD505": "for x in loader:\n    x.sum().backward()\n    optimizer.step()\n    optimizer.zero_grad()\n",
        "GD401": "model = nn.Linear(3, 3)\nmodel(torch.randn(2, 3)).sum().backward()\n",
        "GD305": "optimizer = torch.optim.SGD([], lr=0.1)\n",
        "GD901": "for x in loader:\n    x.sum().backward()\n    optimizer.step()\n    optimizer.zero_grad()\n",
    }.get(code, "device = 'cuda'\n")
