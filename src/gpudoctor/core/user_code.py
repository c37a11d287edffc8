"""Import the user's ``module:function`` or ``path/to/file.py:function`` (a model factory, a
dataset, a tune target), the same way for every option that takes one.

The current folder is searched for modules even when ``gpudoctor`` runs as a console script
(whose ``sys.path`` starts with the script's folder, not the current one), so
``--model mymodels:cnn`` finds ``./mymodels.py`` as ``python -m`` would.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpudoctor.errors import GpuDoctorUserError


def import_callable(ref: str, *, option: str, example: str) -> Callable[..., Any]:
    """The callable that ``ref`` names; a :class:`GpuDoctorUserError` worded with the accepted
    forms (and ``example``) when it is malformed, cannot be imported or is not callable."""
    forms = f"MODULE:FUNCTION or path/to/file.py:FUNCTION, e.g. {option} {example}"
    module_name, sep, name = ref.rpartition(":")
    if not sep or not module_name or not name:
        raise GpuDoctorUserError(f"{option} {ref!r} should be {forms}")
    try:
        module = _load_file(module_name, ref, option) if module_name.endswith(".py") else _load_module(module_name)
    except ImportError as exc:
        raise GpuDoctorUserError(
            f"cannot import {module_name!r} for {option} ({exc}); run from the folder that holds it, "
            f"add that folder to PYTHONPATH, or give the file: {forms}") from None
    func = getattr(module, name, None)
    if func is None:
        raise GpuDoctorUserError(f"{module_name!r} has no {name!r} (from {option} {ref!r})")
    if not callable(func):
        raise GpuDoctorUserError(f"{option} {ref!r} is not callable")
    return func


def _load_module(module_name: str) -> Any:
    here = os.getcwd()
    if "" not in sys.path and here not in sys.path:
        sys.path.append(here)  # after the installed packages: a local file never shadows one
    return importlib.import_module(module_name)


def _load_file(file_name: str, ref: str, option: str) -> Any:
    path = Path(file_name).resolve()
    if not path.is_file():
        raise GpuDoctorUserError(f"{option} {ref!r}: {path} does not exist")
    module_name = f"_gpudoctor_user_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise GpuDoctorUserError(f"{option} {ref!r}: {path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    folder = str(path.parent)
    if folder not in sys.path:  # the file's own imports of its neighbours
        sys.path.append(folder)
    spec.loader.exec_module(module)
    return module
