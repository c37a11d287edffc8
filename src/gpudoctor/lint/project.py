"""The lowest PyTorch version a project declares, read from the files next to the code.

Rules whose claim depends on the PyTorch version (``torch.load``'s ``weights_only`` default became
True in 2.6; ``torch.amp.GradScaler`` exists from 2.3) ask :func:`torch_floor`. It walks up from a
file's folder to the nearest folder whose ``requirements*.txt``, ``pyproject.toml``, ``setup.py``
or ``setup.cfg`` names ``torch`` (a ``setup.py`` only when it calls setuptools' ``setup()``, and
never through its ``import torch`` lines), and returns the lower bound there (``torch>=2.6`` -> (2, 6)), or
None when the requirement has no lower bound or nothing is declared. The installed torch is not
consulted: lint runs in CI and pre-commit environments, not where training runs (and a
pre-commit environment has no torch). ``target-torch`` in ``[tool.gpudoctor.lint]`` overrides it.
Plain text parsing: nothing is imported or executed.
"""

from __future__ import annotations

import ast
import os
import re
from functools import lru_cache
from pathlib import Path

from gpudoctor.analysis.env_text import version_parts

_FILES = ("pyproject.toml", "setup.cfg", "setup.py")
_REQ = re.compile(
    r"""(?:^|["'\s,\[])torch\s*(?:\[[^\]]*\]\s*)?(?P<spec>(?:(?:===|>=|==|~=|<=|!=|>|<)\s*[0-9][0-9a-z.*+]*\s*,?\s*)*)"""
    r"""(?=$|["';#\s\],)])""",
    re.MULTILINE,
)
_CLAUSE = re.compile(r"(===|>=|==|~=|<=|!=|>|<)\s*([0-9][0-9a-z.*+]*)")
_SETUP_CALL = re.compile(r"^\s*(?:[\w.]+\.)?setup\s*\(", re.MULTILINE)
_IMPORT_LINE = re.compile(r"^\s*(?:import|from)\s.*$", re.MULTILINE)
_STOP = (".git", ".hg")


def floor_of(spec: str) -> tuple[int, ...] | None:
    """The lower bound a specifier such as ``>=2.6,<3`` puts on the version (None: no bound)."""
    floors = [version_parts(v) for op, v in _CLAUSE.findall(spec) if op in (">=", "==", "~=", "===", ">")]
    return max(floors) if floors else None


def ceiling_of(spec: str) -> tuple[int, ...] | None:
    """An exclusive upper bound a specifier puts on the version: every allowed version is below
    it (``==1.13.1`` -> (1, 13, 1, 1), ``<2.4`` -> (2, 4), ``<=2.3`` -> (2, 3, 1)); None: unbounded."""
    tops = []
    for op, v in _CLAUSE.findall(spec):
        if "*" in v:
            continue
        if op in ("==", "===", "<="):
            tops.append(version_parts(v) + (1,))
        elif op == "<":
            tops.append(version_parts(v))
    return min(tops) if tops else None


def _packaging_text(text: str) -> str:
    """What a ``setup.py`` declares: nothing unless it calls ``setup(...)`` from setuptools or
    distutils (a module of a package may be named ``setup.py``), and never its ``import torch``
    lines (a CUDA-extension build imports torch without declaring a version)."""
    if not ("setuptools" in text or "distutils" in text) or not _SETUP_CALL.search(text):
        return ""
    return _IMPORT_LINE.sub("", text)


def _declared_in(folder: Path) -> tuple[bool, tuple[int, ...] | None, tuple[int, ...] | None]:
    names = [folder / name for name in _FILES]
    try:
        names += sorted(folder.glob("requirements*.txt"))
    except OSError:
        return False, None, None
    found, floors, ceilings = False, [], []
    for file in names:
        try:
            if not file.is_file():
                continue
            text = file.read_text(encoding="utf-8", errors="replace")[:200_000]
        except OSError:
            continue
        if file.name == "setup.py":
            text = _packaging_text(text)
        for match in _REQ.finditer(text):
            found = True
            floor = floor_of(match.group("spec"))
            if floor:
                floors.append(floor)
            ceilings.append(ceiling_of(match.group("spec")))
    ceiling = None if not ceilings or None in ceilings else max(ceilings)  # any unbounded mention wins
    return found, (min(floors) if floors else None), ceiling


@lru_cache(maxsize=4096)
def _folder_bounds(folder: Path) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    found, floor, ceiling = _declared_in(folder)
    if found:
        return floor, ceiling
    if any((folder / stop).exists() for stop in _STOP) or folder.parent == folder:
        return None, None
    return _folder_bounds(folder.parent)


def torch_floor(path: str) -> tuple[int, ...] | None:
    """The declared lower bound on torch for the project holding ``path`` (None when unknown)."""
    folder = _folder_of(path)
    return None if folder is None else _folder_bounds(folder)[0]


def torch_ceiling(path: str) -> tuple[int, ...] | None:
    """The declared exclusive upper bound on torch (``torch==1.13.1`` pins below (1, 13, 1, 1));
    None when any declaration leaves it open or nothing is declared."""
    folder = _folder_of(path)
    return None if folder is None else _folder_bounds(folder)[1]


def _folder_of(path: str) -> Path | None:
    """The folder holding ``path`` (None for stdin, ``-``, or a path that cannot be resolved)."""
    if not path or path == "-":
        return None
    try:
        return Path(path).resolve().parent
    except (OSError, RuntimeError):
        return None


_ROOT_MARKERS = (".git", ".hg", "pyproject.toml", "setup.py", "setup.cfg")
_SKIP = frozenset({".git", ".hg", "__pycache__", ".venv", "venv", "node_modules", "build", "dist", ".tox"})
_MAX_FILES = 20_000


@lru_cache(maxsize=1024)
def _root(folder: Path) -> Path | None:
    if any((folder / marker).exists() for marker in _ROOT_MARKERS):
        return folder
    return None if folder.parent == folder else _root(folder.parent)


@lru_cache(maxsize=256)
def _tree_mentions(root: Path, needle: str) -> bool:
    seen = 0
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _SKIP and not d.startswith(".")]
        for name in files:
            if not name.endswith(".py"):
                continue
            seen += 1
            if seen > _MAX_FILES:
                return True  # too large to read: assume it does (rules relying on this stay silent)
            try:
                if needle in (Path(dirpath) / name).read_text(encoding="utf-8", errors="replace"):
                    return True
            except OSError:
                continue
    return False


def project_mentions(path: str, needle: str) -> bool:
    """Whether any Python file of the project holding ``path`` (the nearest folder up with
    ``.git``/``pyproject.toml``/``setup.py``, else the file's own folder) contains ``needle``.
    Read once per project and needle; used for settings made in another module (GD105)."""
    folder = _folder_of(path)
    return folder is not None and _tree_mentions(_root(folder) or folder, needle)


_STAR_DEPTH = 3  # ``from a import *`` where ``a`` itself star-imports ``b``: followed this deep


def _module_file(folder: Path, module: str) -> Path | None:
    """``utils`` -> ``folder/utils.py`` or ``folder/utils/__init__.py`` (None: not a local file)."""
    base = folder.joinpath(*module.split(".")) if module else folder
    for candidate in (base.with_name(base.name + ".py"), base / "__init__.py"):
        try:
            if candidate.is_file():
                return candidate
        except OSError:
            return None
    return None


@lru_cache(maxsize=1024)
def _exported_imports(file: Path, depth: int) -> tuple[tuple[str, str], ...]:
    """The imported names a star import of ``file`` brings: its top-level ``import``/``from``
    bindings (``torch``, ``nn`` -> ``torch.nn``), limited to ``__all__`` when it has one, without
    ``_private`` names, and those of its own local star imports."""
    try:
        tree = ast.parse(file.read_text(encoding="utf-8", errors="replace")[:1_000_000])
    except (OSError, SyntaxError, ValueError):
        return ()
    found: dict[str, str] = {}
    exported: set[str] | None = None
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                found[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom) and node.names[0].name == "*":
            if depth < _STAR_DEPTH:
                target = _star_target(file.parent, node.module or "", node.level)
                found.update({k: v for k, v in (_exported_imports(target, depth + 1) if target else ()) if k not in found})
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                found[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
              and isinstance(node.value, (ast.List, ast.Tuple))):
            exported = {e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return tuple((k, v) for k, v in found.items()
                 if not k.startswith("_") and (exported is None or k in exported))


def _star_target(folder: Path, module: str, level: int) -> Path | None:
    """The local file a star import names, seen from a file in ``folder``: relative imports from
    the package folder up, absolute ones from the file's folder (a script run from there) or from
    the project root; None for an installed package."""
    if level:
        for _ in range(level - 1):
            folder = folder.parent
        return _module_file(folder, module)
    if not module:
        return None
    root = _root(folder)
    for base in dict.fromkeys(f for f in (folder, root) if f is not None):
        found = _module_file(base, module)
        if found is not None:
            return found
    return None


def star_imports(path: str, module: str | None, level: int) -> dict[str, str]:
    """What ``from <module> import *`` in the file at ``path`` binds to imported names, when the
    module is a file of the same project (``from utils import *``, utils doing ``import torch``):
    ``{"torch": "torch", "nn": "torch.nn"}``. Empty for installed packages and unreadable files."""
    folder = _folder_of(path)
    target = None if folder is None else _star_target(folder, module or "", level)
    try:
        return dict(_exported_imports(target, 0)) if target is not None else {}
    except RecursionError:
        return {}
