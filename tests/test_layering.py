"""The import contract of DESIGN.md: data flows one way.

collectors (measure) -> records (plain data) -> analysis (pure) -> report/cli (render).
``records`` uses the standard library only; ``analysis``, ``lint``, ``explain`` and ``report``
import only ``records`` (no torch); the engine never imports collectors; nothing imports ``cli``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "gpudoctor"

# subpackage -> gpudoctor subpackages it may import (itself and ``errors`` always allowed)
ALLOWED = {
    "records": set(),
    "core": {"records"},
    "collectors": {"records", "core"},
    "analysis": {"records"},
    "explain": {"records"},
    "lint": {"records"},
    "report": {"records", "analysis"},
    "train": {"records", "core"},
    "bench": {"records", "core"},
    "workloads": set(),
    "tune": {"records", "core", "train", "collectors", "analysis"},
    "memory": {"records", "core", "collectors", "analysis"},
    "data": set(),
    "cli": None,  # the top layer: anything
}
# third-party modules a pure layer must not import
FORBIDDEN_THIRD_PARTY = {
    "records": None,  # None: standard library only
    "analysis": {"torch", "pynvml", "psutil", "rich", "typer", "numpy"},
    "explain": {"torch", "pynvml"},
    "lint": {"torch", "pynvml"},
    "report": {"torch", "pynvml"},
}
TOP_LEVEL_MODULES = {"__init__", "__main__", "errors"}


def _modules():
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        yield rel.parts[0].removesuffix(".py"), path


def _imports(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module


@pytest.mark.parametrize("package,path", list(_modules()), ids=lambda v: str(v))
def test_import_directions(package: str, path: Path) -> None:
    if package in TOP_LEVEL_MODULES:
        return
    assert package in ALLOWED, f"new top-level package {package!r}: add it to the contract"
    allowed = ALLOWED[package]
    forbidden = FORBIDDEN_THIRD_PARTY.get(package, set())
    problems = []
    for lineno, name in _imports(path):
        top = name.split(".")[0]
        if top == "gpudoctor":
            parts = name.split(".")
            target = parts[1] if len(parts) > 1 else ""
            if target in ("", "errors") or target == package:
                continue
            if target == "cli":
                problems.append(f"{lineno}: imports the cli layer ({name})")
            elif allowed is not None and target not in allowed:
                problems.append(f"{lineno}: {package} may not import {name}")
        elif forbidden is None:
            if top not in sys.stdlib_module_names and top != "__future__":
                problems.append(f"{lineno}: records must use the standard library only ({name})")
        elif top in forbidden:
            problems.append(f"{lineno}: {package} must not import {name}")
    assert not problems, f"{path.relative_to(SRC)}:\n" + "\n".join(problems)
