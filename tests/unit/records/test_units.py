"""records/units.py is the one place for binary units, the byte formatter and "missing"."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpudoctor.records.units import GIB, KIB, MIB, MISSING, gib_number, human_bytes

SRC = Path(__file__).resolve().parents[3] / "src" / "gpudoctor"
UNIT_NAMES = {"kib", "mib", "gib", "kb", "mb", "gb", "kilobyte", "megabyte", "gigabyte"}


@pytest.mark.parametrize(
    ("n", "digits", "text"),
    [
        (None, 1, "n/a"),
        (0, 1, "0 B"),
        (512, 1, "512 B"),
        (1536, 1, "1.5 KiB"),
        (64 * MIB, 1, "64.0 MiB"),
        (3 * GIB // 2, 1, "1.5 GiB"),
        (3 * GIB // 2, 2, "1.50 GiB"),
        (2048 * GIB, 1, "2048.0 GiB"),  # GiB is the largest unit
        (-2 * MIB, 1, "-2.0 MiB"),
    ],
)
def test_human_bytes(n: int | None, digits: int, text: str) -> None:
    assert human_bytes(n, digits) == text


def test_units_and_gib_number() -> None:
    assert (KIB, MIB, GIB) == (1024, 1024**2, 1024**3)
    assert gib_number(None) == MISSING == "n/a"
    assert gib_number(5 * GIB + GIB // 2) == "5.5"
    assert gib_number(140 * GIB, 0) == "140"


def _constant_value(node: ast.expr) -> int | float | None:
    try:
        value = eval(compile(ast.Expression(node), "<const>", "eval"), {"__builtins__": {}})  # noqa: S307
    except Exception:  # names, calls: not a literal size
        return None
    return value if isinstance(value, (int, float)) else None


def test_no_module_defines_its_own_size_unit() -> None:
    """``MIB = 1 << 20`` and friends live in records/units.py only."""
    sizes = {KIB, MIB, GIB}
    copies = []
    for path in sorted(SRC.rglob("*.py")):
        if path == SRC / "records" / "units.py":
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if not isinstance(node, ast.Assign) or _constant_value(node.value) not in sizes:
                continue
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            if any(name.strip("_").lower() in UNIT_NAMES for name in names):
                copies.append(f"{path.relative_to(SRC)}:{node.lineno} {names}")
    assert copies == [], "import KIB/MIB/GIB from gpudoctor.records.units"
