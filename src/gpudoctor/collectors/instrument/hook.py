"""Install the probes the moment the script imports ``torch`` — not before.

Importing torch in ``sitecustomize`` would cost every interpreter the child starts (torchrun's
launcher, helper tools) a second or more; instead a meta-path finder waits for ``import torch``,
lets it finish, then installs the probes. If torch is already imported, they install at once.
"""

from __future__ import annotations

import importlib.abc
import sys


class _TorchImportHook(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps torch's loader so the probes install right after torch loads."""

    def find_spec(self, name, path, target=None):  # noqa: ANN001 - importlib protocol
        if name != "torch":
            return None
        _remove_hook()
        spec = None
        for finder in list(sys.meta_path):  # whoever would have found torch (paths, editable installs)
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        original_exec = spec.loader.exec_module

        def exec_module(module):  # noqa: ANN001
            original_exec(module)
            _install()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


_HOOK = _TorchImportHook()


def _remove_hook() -> None:
    if _HOOK in sys.meta_path:
        sys.meta_path.remove(_HOOK)


def _install() -> None:
    try:
        from gpudoctor.collectors.instrument import probes

        probes.install()
    except Exception as exc:  # noqa: BLE001 - never break the user's script
        import traceback

        print(f"gpudoctor: probes not installed ({type(exc).__name__}: {exc})", file=sys.stderr)
        traceback.print_exc()


def install_on_torch_import() -> None:
    """Install now if torch is loaded, else as soon as it is imported."""
    if "torch" in sys.modules:
        _install()
    elif _HOOK not in sys.meta_path:
        sys.meta_path.insert(0, _HOOK)
