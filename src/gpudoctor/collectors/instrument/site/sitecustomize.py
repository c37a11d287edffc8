"""gpudoctor's start-up hook for ``gpudoctor run`` (see ``gpudoctor.collectors.instrument``).

Inert unless ``GPUDOCTOR_RUN_DIR`` is set. Always chains to the next ``sitecustomize`` on
``sys.path`` (a conda or cluster one must keep working). Never raises: a probe that fails to
install prints one line on stderr and the script runs unprobed.
"""

import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _chain() -> None:
    """Import the ``sitecustomize`` that this one shadows, if any."""
    me = sys.modules.get("sitecustomize")
    others = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _HERE]
    try:
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec("sitecustomize", others)
    except Exception:  # noqa: BLE001 - a broken path entry must not break start-up
        spec = None
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - same behaviour as site.py: report, continue
        print(f"Error in sitecustomize ({spec.origin}); set PYTHONVERBOSE for traceback: "
              f"{type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        if me is not None:
            sys.modules["sitecustomize"] = me


def _activate() -> None:
    if not os.environ.get("GPUDOCTOR_RUN_DIR"):
        return
    root = os.environ.get("GPUDOCTOR_PKG_ROOT")
    if root and root not in sys.path:
        sys.path.append(root)  # appended: the user's own packages keep priority
    try:
        from gpudoctor.collectors.instrument import hook

        hook.install_on_torch_import()
    except Exception as exc:  # noqa: BLE001 - never break the user's script
        print(f"gpudoctor: probes not installed ({type(exc).__name__}: {exc})", file=sys.stderr)


_chain()
_activate()
