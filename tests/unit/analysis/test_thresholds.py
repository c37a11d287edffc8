"""The threshold table: every limit has a reason, and a mapping of overrides is checked."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpudoctor.analysis.thresholds import Thresholds, threshold_table, thresholds_from_mapping
from gpudoctor.errors import GpuDoctorUserError

ANALYSIS = Path(__file__).resolve().parents[3] / "src" / "gpudoctor" / "analysis"


def test_every_threshold_has_a_reason() -> None:
    table = threshold_table()
    assert len(table) >= 40
    for info in table:
        assert len(info.reason) >= 40, f"{info.name}: say what set it"
        assert info.type in ("int", "float")
        assert info.default == getattr(Thresholds(), info.name)


def test_overrides_apply_and_keep_the_rest() -> None:
    th = thresholds_from_mapping({"info_gain": 0, "warmup_steps": 10, "straggler_min_ms": 5})
    assert th.info_gain == 0.0 and isinstance(th.info_gain, float)
    assert th.warmup_steps == 10 and th.straggler_min_ms == 5.0
    assert th.warn_gain == Thresholds().warn_gain


@pytest.mark.parametrize(("values", "message"), [
    ({"warmup_step": 3}, "did you mean 'warmup_steps'"),
    ({"min_steps": 3.0}, "must be an integer"),
    ({"min_steps": True}, "must be an integer"),
    ({"info_gain": "0.1"}, "must be a number"),
    ({"tail_slow_factor": -1}, "negative"),
    ({"leak_min_r2": 2}, "is a share"),
    ({"min_steps": 0}, "must be >= 1"),
])
def test_bad_overrides_say_what_to_fix(values: dict, message: str) -> None:
    with pytest.raises(GpuDoctorUserError, match=message):
        thresholds_from_mapping(values, source="test.toml")


_RULES = ("memory_rules", "transfer_rules", "input_rules", "distributed_rules", "tail_rules",
          "trend_rules", "gradient_rules", "conv_rules", "compute_rules", "sync_rules",
          "numerics_rules", "stall_rules")


@pytest.mark.parametrize("module", _RULES)
def test_rules_compare_with_thresholds_not_literals(module: str) -> None:
    """A comparison of a measured figure against a literal other than 0, 1, 2 (and 4, the
    quarters of the gradient rule) is a limit that belongs in the table; comparisons inside
    f-strings (how many items a line lists) are wording, not limits."""
    tree = ast.parse((ANALYSIS / f"{module}.py").read_text(encoding="utf-8"))
    in_text = {id(n) for s in ast.walk(tree) if isinstance(s, ast.JoinedStr) for n in ast.walk(s)}
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and id(node) not in in_text:
            for side in (node.left, *node.comparators):
                for sub in ast.walk(side):
                    if (isinstance(sub, ast.Constant) and isinstance(sub.value, (int, float))
                            and not isinstance(sub.value, bool) and sub.value not in (0, 1, 2, 4)):
                        bad.append((node.lineno, sub.value))
    assert not bad, f"{module}: literal limits {bad}; move them to analysis/thresholds.py"
