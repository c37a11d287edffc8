"""A file that gets torch only through ``from utils import *`` of a local module is torch code.

Round twelve's recall count (benchmarks/results/lint_recall.md) found ``torch.load`` without
``weights_only`` unreported in a learner's ``eval.py`` whose only import was ``from utils import *``.
"""

from __future__ import annotations

from pathlib import Path

from gpudoctor.lint.config import LintConfig
from gpudoctor.lint.engine import lint_text
from gpudoctor.lint.project import star_imports
from gpudoctor.lint.registry import select_rules

TREE = Path(__file__).resolve().parents[2] / "fixtures" / "lint_recall" / "star"


def _codes(rel: str) -> list[tuple[int, str]]:
    path = TREE / rel
    found = lint_text(path.read_text(encoding="utf-8"), str(path), select_rules(["GD"]), LintConfig())
    return [(v.line, v.code) for v in found]


def test_star_import_of_a_local_module_brings_its_imports() -> None:
    names = star_imports(str(TREE / "eval_star.py"), "utils", 0)
    assert names["torch"] == "torch"
    assert names["nn"] == "torch.nn"
    assert names["DataLoader"] == "torch.utils.data.DataLoader"
    assert names["Adam"] == "torch.optim.Adam"  # utils star-imports helpers in turn
    assert "_hidden" not in names


def test_torch_load_through_star_import_is_reported() -> None:
    assert _codes("eval_star.py") == [(3, "GD601")]


def test_relative_star_import_with_all_is_followed() -> None:
    assert star_imports(str(TREE / "pkg" / "use_relative.py"), "common", 1) == {"th": "torch"}
    assert _codes("pkg/use_relative.py") == [(3, "GD601")]


def test_all_that_leaves_torch_out_exports_nothing() -> None:
    assert star_imports(str(TREE / "pkg" / "use_restricted.py"), "restricted", 1) == {}
    assert _codes("pkg/use_restricted.py") == []


def test_star_import_of_a_module_without_torch_or_not_in_the_project_stays_silent() -> None:
    assert star_imports(str(TREE / "plain" / "use_plain.py"), "noutils", 0) == {"json": "json"}
    assert star_imports(str(TREE / "plain" / "use_plain.py"), "somepackage_not_here", 0) == {}
    assert _codes("plain/use_plain.py") == []


def test_stdin_has_no_project() -> None:
    assert star_imports("-", "utils", 0) == {}
