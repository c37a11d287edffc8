"""One way to run a rule and honour ``# noqa`` for Python files and shell scripts alike."""

from __future__ import annotations

import types

from gpudoctor.lint.engine import lint_source
from gpudoctor.lint.rule_run import noqa_map, silenced
from gpudoctor.lint.rules import gd413_shell_launch_script as gd413
from gpudoctor.lint.shell import lint_shell


def test_noqa_map_reads_bare_and_listed_codes():
    noqa = noqa_map(["x = 1", "y = 2  # noqa", "z = 3  # NOQA: gd201, GD413"])
    assert noqa == {2: None, 3: frozenset({"GD201", "GD413"})}
    assert silenced(noqa, "GD999", [2]) and silenced(noqa, "GD413", [3])
    assert not silenced(noqa, "GD41", [3]) and not silenced(noqa, "GD201", [1])


def test_a_shell_noqa_silences_its_line_for_the_codes_it_names():
    bad_lines = gd413.BAD.splitlines()
    assert [v.line for v in lint_shell(gd413.BAD, "x.sh", [gd413])] == [1, 2]
    named = f"{bad_lines[0]}  # noqa: GD413\n{bad_lines[1]}  # noqa: GD4130\n"
    assert [v.line for v in lint_shell(named, "x.sh", [gd413])] == [2]  # codes match exactly
    bare = f"{bad_lines[0]}\n{bad_lines[1]}  # noqa\n"
    assert [v.line for v in lint_shell(bare, "x.sh", [gd413])] == [1]


def _broken_rule(kind: str) -> types.ModuleType:
    rule = types.ModuleType("broken")
    rule.CODE, rule.KIND, rule.MESSAGE, rule.SEVERITY, rule.FIXABLE = "GD998", kind, "", "warning", False

    def check(ctx):
        raise RuntimeError("boom")

    rule.check = check
    return rule


def test_a_rule_that_raises_is_reported_in_both_file_kinds():
    for found in (lint_source("x = 1\n", "a.py", [_broken_rule("py")]),
                  lint_shell("echo hi\n", "a.sh", [_broken_rule("sh")])):
        assert [(v.code, v.severity, v.line) for v in found] == [("GD998", "error", 1)]
        assert "internal error in rule GD998" in found[0].message and "boom" in found[0].message
