"""``--thresholds FILE`` of ``run``, ``diagnose`` and ``doctor``: the analysis limits from a TOML file.

The CLI reads the file (analysis does no I/O); :func:`gpudoctor.analysis.thresholds.thresholds_from_mapping`
checks the names, types and ranges. The option's callback makes the loaded
:class:`~gpudoctor.analysis.thresholds.Thresholds` the current ones for the rest of that one
command (a context variable reset when the command's context closes), so the shared steps in
:mod:`gpudoctor.cli.diagnose` (``analyse``, ``payload``, ``render``) use them without every caller
passing them along; :func:`current_thresholds` reads them.
"""

from __future__ import annotations

import contextvars
import tomllib
from pathlib import Path
from typing import Any

import typer

from gpudoctor.errors import GpuDoctorUserError

_CURRENT: contextvars.ContextVar[Any] = contextvars.ContextVar("gpudoctor_thresholds", default=None)

HELP = ("A TOML file of analysis thresholds (name = value) that replace the defaults; the names, "
        "defaults and reasons: docs/THRESHOLDS.md.")


def load_thresholds(path: Path) -> Any:
    """The default thresholds with the values of the TOML file at ``path`` applied; a
    :class:`GpuDoctorUserError` (exit 2) saying what is wrong with the file otherwise."""
    from gpudoctor.analysis.thresholds import thresholds_from_mapping

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise GpuDoctorUserError(f"--thresholds {path}: no such file; give a TOML file of name = value "
                                 "lines (docs/THRESHOLDS.md lists the names)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise GpuDoctorUserError(f"--thresholds {path}: cannot read it ({exc})") from None
    try:
        values = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise GpuDoctorUserError(f"--thresholds {path}: not valid TOML ({exc}); write name = value lines, "
                                 "e.g. info_gain = 0.02") from None
    return thresholds_from_mapping(values, source=f"--thresholds {path}")


def current_thresholds() -> Any:
    """The thresholds of the command being run: the ``--thresholds`` file's, else the defaults."""
    from gpudoctor.analysis.thresholds import Thresholds

    current = _CURRENT.get()
    return current if current is not None else Thresholds()


def _use(ctx: typer.Context, path: Path | None) -> Path | None:
    if path is None:
        return None
    token = _CURRENT.set(load_thresholds(path))
    ctx.call_on_close(lambda: _CURRENT.reset(token))
    return path


def thresholds_option() -> Any:
    """The ``--thresholds FILE`` option; its callback loads the file as the parameters are parsed,
    so a bad file is refused (exit 2) before anything runs."""
    return typer.Option(None, "--thresholds", metavar="FILE", help=HELP, callback=_use,
                        dir_okay=False)


__all__ = ["HELP", "current_thresholds", "load_thresholds", "thresholds_option"]
