"""Code of a script's project that makes a generally safe change unsafe there, found by reading
(nothing is imported or run); each finder returns where and why, or ``""``.

- **own CUDA ops**: a file that imports ``torch.utils.cpp_extension`` builds kernels of its own
  (stylegan2-pytorch's ``op/``: ``AT_DISPATCH_FLOATING_TYPES_AND_HALF``). Autocast hands them the
  dtype it picked, which such kernels often do not dispatch ("not implemented for 'BFloat16'" at
  the first step): bf16/fp16 autocast stays advice.
- **h5py opened in a dataset's ``__init__``**: the one HDF5 handle is inherited by every forked
  loader worker, which h5py does not support (the image-captioning tutorial: "only 1 works with
  h5py"): the script's worker count is kept; the file must be opened per worker first.
"""

from __future__ import annotations

import ast
from pathlib import Path

_CPP_EXT = "torch.utils.cpp_extension"


def custom_ops(tree: ast.AST, name: str) -> str:
    """``"<name>: torch.utils.cpp_extension"`` where ``tree`` (the file ``name``) imports it."""
    for node in ast.walk(tree):
        mods = ([node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else
                [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        if isinstance(node, ast.ImportFrom) and node.module == "torch.utils":
            mods += [f"torch.utils.{a.name}" for a in node.names]
        if any(m == _CPP_EXT or m.startswith(_CPP_EXT + ".") for m in mods):
            return f"{name} imports {_CPP_EXT} (line {node.lineno})"
    return ""


def own_ops_reason(where: str) -> str:
    """Why autocast stays advice in a project that builds its own CUDA ops (``where``: :func:`custom_ops`)."""
    return (f"the project builds CUDA ops of its own ({where}): autocast would hand them bf16/fp16 tensors "
            "their kernels may not dispatch; check the ops' dtypes (or cast around them), then autocast")


def h5py_in_init(tree: ast.AST, name: str) -> str:
    """``"<Class>.__init__ opens h5py.File at <name> line N"`` for a class whose ``__init__`` opens one."""
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        for init in cls.body:
            if not (isinstance(init, ast.FunctionDef) and init.name == "__init__"):
                continue
            for node in ast.walk(init):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "File" \
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "h5py":
                    where = f"{name} line {node.lineno}" if name else f"line {node.lineno}"
                    return f"{cls.name}.__init__ opens h5py.File at {where}"
    return ""


def in_files(paths: list[Path], base: Path) -> tuple[str, str]:
    """``(custom_ops, h5py_in_init)`` of the first of ``paths`` (modules of the project) with each."""
    ops = h5 = ""
    for path in paths:
        try:
            tree = ast.parse(path.read_bytes().decode("utf-8"))
        except (SyntaxError, ValueError, UnicodeDecodeError, OSError):
            continue
        try:
            name = str(path.resolve().relative_to(base.resolve()))
        except ValueError:
            name = path.name
        ops = ops or custom_ops(tree, name)
        h5 = h5 or h5py_in_init(tree, name)
    return ops, h5


__all__ = ["custom_ops", "h5py_in_init", "in_files", "own_ops_reason"]
