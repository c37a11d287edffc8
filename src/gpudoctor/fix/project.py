"""The training loop in another module of the script's own project (``from mingpt.trainer import
Trainer`` in ``projects/adder/adder.py``, the loop in ``mingpt/trainer.py``).

When the script itself has no training loop, the modules it imports are looked up in the script's
folder and the folders above it, up to the project's root (the first folder holding ``.git``,
``pyproject.toml``, ``setup.py`` or ``setup.cfg``; at most four levels up) — never in
site-packages. The one such module with a located training loop is the file to patch; two or more
are ambiguous and give no patch. A module's loop counts only where the script can reach it: the
top-level function or class that holds it is named in the script (``train_one_epoch(...)``,
``Trainer(...)``, ``training_loop.training_loop(...)``) or by a function or class of that module the
script names (mnist_hogwild's ``train`` calling ``train_epoch``); a loop in a class the script never names
(DomainBed's ``Fish.update``, one of ~30 algorithms ``get_algorithm_class(args.algorithm)`` picks at
run time) is not its training loop, and the note says so.
"""

from __future__ import annotations

import ast
from pathlib import Path

from gpudoctor.fix import hazards
from gpudoctor.fix.locate import Located, locate

_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")
_MAX_UP = 4


def project_folders(script: Path) -> list[Path]:
    """The script's folder and those above it, up to the project root (see the module doc)."""
    folder, out = script.resolve().parent, []
    for _ in range(_MAX_UP + 1):
        out.append(folder)
        if any((folder / m).exists() for m in _MARKERS) or folder.parent == folder:
            break
        folder = folder.parent
    return out


def local_modules(script: Path, tree: ast.Module) -> list[tuple[Path, Path]]:
    """``(module file, the folder it is imported from)`` for each absolute import of the script
    that resolves to a file of its project; ``from pkg import name`` also tries ``pkg/name.py``
    (a module imported from its package), which a name defined in ``pkg`` itself does not have."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
            # ``from training import training_loop``: a module of the package (edm, stylegan2-ada)
            names += [f"{node.module}.{a.name}" for a in node.names if a.name != "*"]
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    out: list[tuple[Path, Path]] = []
    for name in dict.fromkeys(names):
        rel = Path(*name.split("."))
        for root in project_folders(script):
            for path in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
                if path.is_file() and path.resolve() != script.resolve() \
                        and not {"site-packages", "dist-packages"} & set(path.resolve().parts):
                    out.append((path, root))
                    break
            else:
                continue
            break
    return out


_CONVS = frozenset({"Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"})


def _builds_conv(path: Path) -> bool:
    """``path`` calls ``nn.Conv2d(...)`` (or another convolution class) somewhere."""
    try:
        tree = ast.parse(path.read_bytes().decode("utf-8"))
    except (SyntaxError, ValueError, UnicodeDecodeError, OSError):
        return False
    return any(isinstance(n, ast.Call) and (n.func.attr if isinstance(n.func, ast.Attribute)
                                             else getattr(n.func, "id", "")) in _CONVS for n in ast.walk(tree))


def imports_conv(script: Path, tree: ast.Module) -> bool:
    """A module of the project that ``script`` imports builds convolutions (the model defined in
    ``models/`` or ``transformer_net.py``, the script only importing it); a package counts with
    the files of its folder (``from models import *`` re-exports ``models/resnet.py``)."""
    for path, _ in local_modules(script, tree):
        files = sorted(path.parent.glob("*.py")) if path.name == "__init__.py" else [path]
        if any(_builds_conv(f) for f in files):
            return True
    return False


def locate_project(script: Path, source: str) -> Located:
    """The script's own training code, or, when it has no training loop, that of the one module of
    its project that has. Raises ``SyntaxError`` when the script does not parse. ``conv`` is also
    true when the model's convolutions are built in a module of the project it imports."""
    found = _locate(script, source)
    found.script = str(script)
    if found.loop is not None and not found.conv:
        found.conv = imports_conv(Path(found.file) if found.file else script, found.ctx.tree)
    if found.loop is not None and not (found.custom_ops and found.h5py_init):
        ops, h5 = hazards.in_files(project_files(script, source, found), script.resolve().parent)
        found.custom_ops, found.h5py_init = found.custom_ops or ops, found.h5py_init or h5
    return found


def project_files(script: Path, source: str, found: Located) -> list[Path]:
    """The script, the file holding its loop, and the project modules either imports (a package
    with the ``.py`` files of its folder: stylegan2's ``from op import ...`` builds its kernels in
    ``op/fused_act.py``)."""
    files = [script] + ([Path(found.file)] if found.file else [])
    try:
        trees = [(script, ast.parse(source))] + ([(Path(found.file), found.ctx.tree)] if found.file else [])
    except SyntaxError:
        trees = []
    for path, tree in trees:
        for module, _ in local_modules(path, tree):
            files += sorted(module.parent.glob("*.py")) if module.name == "__init__.py" else [module]
    return list(dict.fromkeys(files))


def _locate(script: Path, source: str) -> Located:
    found = locate(source, str(script))
    if found.loop is not None:
        return found
    hits = []
    for path, root in local_modules(script, found.ctx.tree):
        try:
            other = locate(path.read_bytes().decode("utf-8"), str(path))
        except (SyntaxError, ValueError, UnicodeDecodeError):
            continue
        if other.loop is not None:
            holder = _holder(other)
            if holder and holder not in _reached(other.ctx.tree, _names(found.ctx.tree)):
                found.notes.append(f"the loop in {path.name} is in {holder}, which the script never names: "
                                   "which code it runs there is picked at run time")
                continue
            other.file, other.import_root = str(path), str(root)
            hits.append(other)
    if len(hits) == 1:
        return hits[0]
    if len(hits) > 1:
        found.notes.append("training loops in " + ", ".join(h.file for h in hits) + ": which one runs is not known")
    return found


def _holder(found: Located) -> str:
    """The top-level function or class of its module that holds the located loop ("" at top level)."""
    line = found.loop.lineno
    for node in found.ctx.tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                and node.lineno <= line <= (node.end_lineno or node.lineno):
            return node.name
    return ""


def _reached(module: ast.Module, named: set[str]) -> set[str]:
    """The module's top-level functions and classes the script reaches: those it names, and those
    they name in turn (mnist_hogwild's ``train`` calls ``train_epoch``, which holds the loop)."""
    tops = {n.name: n for n in module.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    reached, todo = set(), [n for n in tops if n in named]
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo += [n for n in _names(tops[name]) if n in tops and n not in reached]
    return reached


def _names(tree: ast.AST) -> set[str]:
    """Every name the script uses: bare names, attributes (``engine.train_one_epoch``), imported names."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update(a.asname or a.name.split(".")[-1] for a in node.names)
            out.update(a.name for a in node.names)
    return out


__all__ = ["imports_conv", "local_modules", "locate_project", "project_files", "project_folders"]
