"""Lazy imports of optional or heavy modules, with an install hint when they are missing."""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingDependency(ImportError):
    """An optional package is not installed; the message says how to install it."""


def require(module: str, *, package: str | None = None, purpose: str = "") -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependency` naming the pip package to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        what = f" for {purpose}" if purpose else ""
        raise MissingDependency(
            f"{module} is needed{what} but is not installed: pip install {package or module}"
        ) from exc
