"""The architecture contract, checked: data flows one way (docs/ARCHITECTURE.md draws it).

The contracts live in pyproject.toml's ``[tool.importlinter]`` and are checked by import-linter
(``lint-imports``), which sees every import statement, absolute or relative, at module level or
inside a function, and ``from gpudoctor import analysis`` as an import of ``gpudoctor.analysis``:

- layers: cli -> tune | memory -> report | bench | train | collectors | explain | lint ->
  analysis | core -> records -> errors | data; a higher layer may import a lower one, "|" marks
  independent siblings (the engine never imports collectors, analysis never imports core);
- workloads are stand-alone scripts that import nothing of gpudoctor;
- records (and errors) use the standard library only; analysis, report, explain and lint never
  import torch, NVML, numpy or psutil;
- analysis does no I/O (no os, pathlib, io, subprocess, socket, ...); records read and write their
  own files but start no process and open no socket.

Two things import-linter cannot see are checked here with the AST, against the same layers:
``importlib.import_module("gpudoctor.x")`` / ``__import__("gpudoctor.x")`` with a literal name,
and calls that open files (``open(...)``, ``Path.read_text`` ...) inside analysis.
The last tests plant violations in a copy of the tree and see each check fail.
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_LINT = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
_FILE_CALLS = {"open", "read_text", "write_text", "read_bytes", "write_bytes", "mkdir", "unlink"}


def _config(root: Path) -> dict:
    return tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]


def _contract(root: Path, contract_id: str) -> dict:
    return next(c for c in _config(root)["contracts"] if c["id"] == contract_id)


def _layers(root: Path) -> list[set[str]]:
    """The layers contract as sets of subpackage names, top first."""
    return [
        {name.strip().removeprefix("gpudoctor.") for name in re.split(r"[|:]", line)}
        for line in _contract(root, "layers")["layers"]
    ]


def _may_import(layers: list[set[str]], source: str, target: str) -> bool:
    """Whether subpackage ``source`` may import subpackage ``target`` under the layers."""
    if source == target:
        return True
    rank = {name: i for i, names in enumerate(layers) for name in names}
    if source not in rank or target not in rank:
        return source not in rank and target != "cli"  # outside the layers: only cli is off limits
    return rank[target] > rank[source]


def run_lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """Run import-linter on the tree at ``root`` (its src/ first on the path), without a cache."""
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    return subprocess.run(
        [sys.executable, "-c", _LINT, "--no-cache", "--no-logo"],
        cwd=root, env=env, capture_output=True, text=True, timeout=120, check=False,
    )


def _literal(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return str(node.values[0].value)  # f"gpudoctor.analysis.{x}": its literal head
    return None


def unseen_violations(root: Path) -> list[str]:
    """What import-linter cannot see: dynamic imports of gpudoctor modules, file I/O in analysis."""
    src = root / "src" / "gpudoctor"
    layers = _layers(root)
    problems = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src)
        package = rel.parts[0].removesuffix(".py")
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name in ("import_module", "__import__"):
                target = _literal(node.args[0]) or ""
                parts = target.split(".")
                if parts[0] == "gpudoctor" and len(parts) > 1 and parts[1]:
                    if not _may_import(layers, package, parts[1]):
                        problems.append(f"{rel}:{node.lineno}: {package} may not import {target}")
            if package == "analysis" and name in _FILE_CALLS:
                problems.append(f"{rel}:{node.lineno}: analysis does no file I/O ({name}())")
    return problems


def test_the_tree_keeps_every_contract() -> None:
    result = run_lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_no_dynamic_import_or_file_io_breaks_the_layers() -> None:
    assert unseen_violations(ROOT) == []


def test_every_subpackage_has_a_place_in_the_contracts() -> None:
    placed = set().union(*_layers(ROOT)) | {
        m.removeprefix("gpudoctor.") for m in _contract(ROOT, "workloads-standalone")["source_modules"]
    }
    packages = {p.name for p in (ROOT / "src" / "gpudoctor").iterdir() if (p / "__init__.py").exists()}
    assert packages - placed == set(), "a new subpackage: give it a layer in pyproject.toml"


def test_the_architecture_page_places_every_subpackage() -> None:
    """docs/ARCHITECTURE.md's table names every subpackage, so a newcomer finds each one's room."""
    page = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    packages = {p.name for p in (ROOT / "src" / "gpudoctor").iterdir() if (p / "__init__.py").exists()}
    missing = sorted(name for name in packages - {"data"} if f"| `{name}/` |" not in page)
    assert missing == [], f"add a row for {missing} to docs/ARCHITECTURE.md"


def test_records_contract_forbids_every_third_party_dependency() -> None:
    """records-stdlib names each dependency's module, so adding a dependency means deciding here."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = {_dist(req) for req in project["dependencies"]}
    shipped: dict[str, set[str]] = {dist: set() for dist in wanted}
    for module, owners in importlib.metadata.packages_distributions().items():
        for owner in owners:
            if _dist(owner) in shipped:
                shipped[_dist(owner)].add(module)
    forbidden = set(_contract(ROOT, "records-stdlib")["forbidden_modules"])
    unlisted = sorted(dist for dist, modules in shipped.items() if not modules & forbidden)
    assert unlisted == [], f"add the module of {unlisted} to records-stdlib in pyproject.toml"


def _dist(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


# --- the checks fail on planted violations, in a copy of the tree -------------------------------

def _copy_tree(tmp_path: Path) -> Path:
    copy = tmp_path / "tree"
    shutil.copytree(ROOT / "src", copy / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    return copy


def _plant(copy: Path, module: str, line: str) -> None:
    path = copy / "src" / "gpudoctor" / module
    path.write_text(path.read_text(encoding="utf-8") + "\n" + line + "\n", encoding="utf-8")


@pytest.mark.parametrize(
    ("module", "line", "expected"),
    [
        ("records/units.py", "from ..analysis import steps as _planted",
         "gpudoctor.records is not allowed to import gpudoctor.analysis"),
        ("records/units.py", "from gpudoctor import analysis as _planted",
         "gpudoctor.records is not allowed to import gpudoctor.analysis"),
        ("train/events.py", "from ..collectors import host as _planted",
         "gpudoctor.train is not allowed to import gpudoctor.collectors"),
        ("analysis/steps.py", "def _planted():\n    import subprocess",
         "gpudoctor.analysis is not allowed to import subprocess"),
        ("report/charts.py", "import torch as _planted",
         "gpudoctor.report is not allowed to import torch"),
        ("records/step.py", "import rich as _planted",
         "gpudoctor.records is not allowed to import rich"),
    ],
    ids=["relative-records-to-analysis", "from-gpudoctor-import", "engine-to-collectors",
         "subprocess-in-analysis", "torch-in-report", "third-party-in-records"],
)
def test_import_linter_fails_on_a_planted_violation(
    tmp_path: Path, module: str, line: str, expected: str
) -> None:
    copy = _copy_tree(tmp_path)
    _plant(copy, module, line)
    result = run_lint_imports(copy)
    assert result.returncode != 0
    assert expected in " ".join(result.stdout.split()), result.stdout


@pytest.mark.parametrize(
    ("module", "line", "expected"),
    [
        ("records/units.py", 'import importlib\n_planted = importlib.import_module("gpudoctor.analysis")',
         "records/units.py:", ),
        ("records/units.py", '_planted = __import__(f"gpudoctor.report.{1}")', "records/units.py:"),
        ("analysis/steps.py", 'def _planted(p):\n    return open(p).read()', "analysis does no file I/O"),
    ],
    ids=["import-module", "dunder-import", "open-in-analysis"],
)
def test_ast_check_fails_on_a_planted_violation(
    tmp_path: Path, module: str, line: str, expected: str
) -> None:
    copy = _copy_tree(tmp_path)
    assert unseen_violations(copy) == []
    _plant(copy, module, line)
    problems = unseen_violations(copy)
    assert any(expected in p for p in problems), problems
