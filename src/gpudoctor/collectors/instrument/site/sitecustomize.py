"""gpudoctor's start-up hook for ``gpudoctor run`` (see ``gpudoctor.collectors.instrument``).

Inert unless ``GPUDOCTOR_RUN_DIR`` is set. Always chains to the next ``sitecustomize`` on
``sys.path`` (a conda or cluster one must keep working). Never raises: a probe that fails to
install prints one line on stderr and the script runs unprobed.

Only the training processes are probed (:func:`_is_target`): the command's first Python process
that imports torch, the workers ``torchrun`` starts, and the ranks ``torch.multiprocessing.spawn``
starts. Any other interpreter started below a probed one (a ``subprocess.run([sys.executable,
...])``, a DataLoader worker under the ``spawn`` start method, a compile worker) drops gpudoctor
from its environment and runs untouched.
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


# Set by a probed process when it installs the probes (see gpudoctor.collectors.instrument).
_OWNER_PID = "GPUDOCTOR_OWNER_PID"
_OWNER_ELASTIC = "GPUDOCTOR_OWNER_ELASTIC"
_SPAWN_PARENT = "GPUDOCTOR_SPAWN_PARENT"


def _is_target() -> bool:
    """Is this interpreter a training process of the command (see the module docstring)?"""
    env = os.environ
    parent = str(os.getppid())
    if env.get(_SPAWN_PARENT):
        spawned = env.pop(_SPAWN_PARENT) == parent  # never passed further down
        if spawned:
            return True  # a torch.multiprocessing.spawn rank
    owner = env.get(_OWNER_PID)
    if not owner:
        return True  # no probed process above us: we are the command (or a launcher of it)
    # torchrun's agent (probed, itself no elastic worker) starts its workers directly.
    return "TORCHELASTIC_RUN_ID" in env and owner == parent and env.get(_OWNER_ELASTIC) != "1"


def _leave() -> None:
    """Not a target: take gpudoctor out of this process's environment (and its children's)."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.abspath(p) != _HERE]
    if paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    else:
        os.environ.pop("PYTHONPATH", None)
    for name in [n for n in os.environ if n.startswith("GPUDOCTOR_")]:
        del os.environ[name]


def _activate() -> None:
    if not os.environ.get("GPUDOCTOR_RUN_DIR"):
        return
    if not _is_target():
        _leave()
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
