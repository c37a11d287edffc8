"""Warnings raised under a probe's wrapper keep the file and line they name unprobed.

A wrapper adds a frame: a warning that torch aims at its caller (``stacklevel=2``) would name
gpudoctor's wrapper instead of the caller the script's output shows without gpudoctor.
"""

from __future__ import annotations

import sys


def warn_as_caller(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, its warnings shown as without this wrapper: one aimed at the
    wrapper's frame (``stacklevel=2`` inside ``fn``) is given to the wrapper's caller, so the
    script's output names the same file and line as it does unprobed (nanoGPT's CPU run:
    ``torch/cuda/amp/grad_scaler.py``, not gpudoctor's ``patches.py``)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn(*args, **kwargs)
    caller = sys._getframe(2)  # above this helper and the wrapper that called it
    for w in caught:
        if w.filename == __file__:
            filename, lineno, g = caller.f_code.co_filename, caller.f_lineno, caller.f_globals
        else:
            filename, lineno, g = w.filename, w.lineno, {}
        warnings.warn_explicit(w.message, w.category, filename, lineno,
                               registry=g.setdefault("__warningregistry__", {}) if g else None,
                               module_globals=g or None)
    return result
