"""Run code the moment a module is imported — not before.

Importing torch in ``sitecustomize`` would cost every interpreter the child starts (torchrun's
launcher, helper tools) a second or more; instead a meta-path finder waits for ``import torch``,
lets it finish, then installs the probes. If torch is already imported, they install at once.
The compile watch (:mod:`~gpudoctor.collectors.instrument.compile_events`) waits the same way
for TorchDynamo (gpudoctor never imports it itself).
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable
from typing import Any


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the loader of ``name`` so ``then`` runs right after it loads.

    Costs one string comparison per import until ``name`` is imported, then leaves the path.
    """

    def __init__(self, name: str, then: Callable[[], None]) -> None:
        self.name, self.then = name, then

    def find_spec(self, name, path, target=None):  # noqa: ANN001 - importlib protocol
        if name != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = None
        for finder in list(sys.meta_path):  # whoever would have found it (paths, editable installs)
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        original_exec, then = spec.loader.exec_module, self.then

        def exec_module(module):  # noqa: ANN001
            original_exec(module)
            then()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def after_import(name: str, then: Callable[[], None]) -> Any:
    """Call ``then()`` now if ``name`` is imported, else right after it is; returns the finder
    (``None`` when it ran at once), for :func:`cancel`."""
    if name in sys.modules:
        then()
        return None
    finder = _AfterImport(name, then)
    sys.meta_path.insert(0, finder)
    return finder


def cancel(finder: Any) -> None:
    """Take a finder of :func:`after_import` off the import path (nothing if it already left)."""
    if finder is not None and finder in sys.meta_path:
        sys.meta_path.remove(finder)


def _install() -> None:
    try:
        from gpudoctor.collectors.instrument import probes

        probes.install()
    except Exception as exc:  # noqa: BLE001 - never break the user's script
        import traceback

        print(f"gpudoctor: probes not installed ({type(exc).__name__}: {exc})", file=sys.stderr)
        traceback.print_exc()


_HOOK: list[Any] = []  # the finder waiting for torch, while it waits


def install_on_torch_import() -> None:
    """Install now if torch is loaded, else as soon as it is imported."""
    if _HOOK and _HOOK[0] in sys.meta_path:
        return
    _HOOK[:] = [after_import("torch", _install)]
