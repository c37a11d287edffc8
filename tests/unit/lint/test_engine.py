"""The engine: discovery, parse errors, noqa, select/ignore, default-off rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.errors import GpuDoctorUserError
from gpudoctor.lint.engine import discover, lint_paths, lint_source
from gpudoctor.lint.registry import ALL_RULES, select_rules

TREE = Path(__file__).resolve().parents[2] / "fixtures" / "lint_tree"
SRC = "import torch\nx = torch.randn(3)\nx.cuda(){}\n"


def _codes(source: str, select=None, ignore=None) -> list[str]:
    return [v.code for v in lint_source(source, "t.py", select_rules(select, ignore))]


@pytest.mark.parametrize("comment,silenced", [
    ("", False), ("  # noqa", True), ("  # noqa: GD101", True), ("  # NOQA:GD101,GD401", True),
    ("  # noqa: GD401", False), ("  # type: ignore  # noqa: GD102 GD101", True), ("  # mentions noqa in prose", False),
])
def test_noqa(comment: str, silenced: bool) -> None:
    assert _codes(SRC.format(comment)) == ([] if silenced else ["GD101"])


def test_noqa_on_last_line_of_a_multiline_call() -> None:
    source = "import torch\nx = torch.randn(3)\nx.to(\n    'cuda'\n)  # noqa: GD101\n"
    assert _codes(source) == []


def test_syntax_error_is_reported_for_that_file_and_others_are_checked() -> None:
    report = lint_paths([TREE / "broken.py", TREE / "train.py"])
    broken = [v for v in report.violations if v.path.endswith("broken.py")]
    assert [v.code for v in broken] == ["E999"]
    assert broken[0].message.startswith("SyntaxError:") and broken[0].line == 1
    assert any(v.path.endswith("train.py") for v in report.violations)
    assert report.files_checked == 2


def test_undecodable_file_is_reported(tmp_path: Path) -> None:
    bad = tmp_path / "latin.py"
    bad.write_bytes(b"x = '\xff\xfe'\n")
    report = lint_paths([bad])
    assert [v.code for v in report.violations] == ["E999"]


def test_discover_skips_hidden_and_virtualenv_dirs(tmp_path: Path) -> None:
    for rel in ("a.py", "pkg/b.py", ".hidden/c.py", "venv/d.py", "pkg/__pycache__/e.py", "notes.txt"):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n")
    assert [p.relative_to(tmp_path).as_posix() for p in discover([tmp_path])] == ["a.py", "pkg/b.py"]
    assert discover([tmp_path / "notes.txt"]) == [tmp_path / "notes.txt"]  # an explicit file is taken


def test_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(GpuDoctorUserError, match="does not exist"):
        lint_paths([tmp_path / "nope.py"])


def test_select_and_ignore_prefixes() -> None:
    default = {rule.CODE for rule in select_rules()}
    assert default == {rule.CODE for rule in ALL_RULES if not rule.CODE.startswith("GD9")}
    assert {r.CODE for r in select_rules(["GD4"])} == {c for c in default if c.startswith("GD4")}
    assert {r.CODE for r in select_rules(["GD1,GD302"])} == {c for c in default if c.startswith("GD1")} | {"GD302"}
    assert "GD901" in {r.CODE for r in select_rules(["GD901"])}
    assert "GD901" in {r.CODE for r in select_rules(["ALL"])}
    assert "GD901" not in {r.CODE for r in select_rules(["GD"])}
    assert {r.CODE for r in select_rules(None, ["GD1", "gd2"])} == {c for c in default if c[2] not in "12"}
    assert select_rules(["GD101"], ["GD101"]) == ()


@pytest.mark.parametrize("bad", ["GD999", "XYZ", "GD7"])
def test_unknown_code_is_a_usage_error(bad: str) -> None:
    with pytest.raises(ValueError, match="unknown rule code"):
        select_rules([bad])
    with pytest.raises(GpuDoctorUserError):
        lint_paths([TREE / "clean.py"], select=[bad])


def test_non_ascii_columns_are_characters() -> None:
    source = "import torch\nx = torch.randn(3)\nλ = 1; x.cuda()\n"
    found = lint_source(source, "t.py", select_rules(["GD101"]))
    assert [(v.line, v.col) for v in found] == [(3, 8)]


def test_a_crashing_rule_is_reported_not_fatal() -> None:
    class Boom:
        CODE, SEVERITY, MESSAGE, FIXABLE = "GD100", "error", "boom", False

        @staticmethod
        def check(ctx):
            raise RuntimeError("bug")

    found = lint_source("x = 1\n", "t.py", [Boom, *select_rules(["GD101"])])
    assert [v.code for v in found] == ["GD100"] and "internal error" in found[0].message
