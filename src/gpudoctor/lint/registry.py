"""The tuple of every rule, and ``--select`` / ``--ignore`` resolution.

Codes are grouped by hundreds: GD1xx device and data movement, GD2xx memory, GD3xx mixed
precision, GD4xx distributed, GD5xx performance and host-device syncs, GD6xx correctness and
safety, GD9xx noisy rules that are off unless selected explicitly.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from gpudoctor.lint import rules as _rules_pkg


def _discover_rules() -> tuple[ModuleType, ...]:
    """Every ``gdNNN_*`` module of :mod:`gpudoctor.lint.rules`, in code order: adding a rule is
    adding its file."""
    names = sorted(m.name for m in pkgutil.iter_modules(_rules_pkg.__path__) if m.name.startswith("gd"))
    return tuple(importlib.import_module(f"{_rules_pkg.__name__}.{name}") for name in names)


ALL_RULES: tuple[ModuleType, ...] = _discover_rules()
DEFAULT_OFF_PREFIX = "GD9"
GROUPS = {
    "GD1": "device and data movement",
    "GD2": "memory",
    "GD3": "mixed precision",
    "GD4": "distributed",
    "GD5": "performance and host-device syncs",
    "GD6": "correctness and safety",
    "GD9": "noisy, off by default",
}
RULES_BY_CODE = {rule.CODE: rule for rule in ALL_RULES}


def _split(values: list[str] | tuple[str, ...] | None) -> list[str]:
    out: list[str] = []
    for value in values or ():
        out += [part.strip().upper() for part in value.split(",") if part.strip()]
    return out


def _expand(prefix: str, *, explicit: bool) -> list[str]:
    if prefix == "ALL":
        return list(RULES_BY_CODE)
    codes = [code for code in RULES_BY_CODE if code.startswith(prefix)]
    if not codes:
        raise ValueError(f"unknown rule code or prefix {prefix!r}: use one of "
                         f"{', '.join(sorted(GROUPS))} or a full code such as GD101 (`gpudoctor lint --help`)")
    if explicit and not prefix.startswith(DEFAULT_OFF_PREFIX):
        codes = [code for code in codes if not code.startswith(DEFAULT_OFF_PREFIX)]
    return codes


def select_rules(select: list[str] | tuple[str, ...] | None = None,
                 ignore: list[str] | tuple[str, ...] | None = None) -> tuple[ModuleType, ...]:
    """Resolve ``--select``/``--ignore`` prefixes (comma-separated or repeated) to rule modules.

    Without ``select`` every rule outside the GD9xx range runs. A prefix such as ``GD`` or ``GD4``
    does not switch on GD9xx rules; ``GD9``, ``GD901`` or ``ALL`` does. Raises ``ValueError`` for a
    code or prefix that matches no rule.
    """
    chosen: list[str] = []
    for prefix in _split(select) or ["GD"]:
        chosen += _expand(prefix, explicit=True)
    dropped = {code for prefix in _split(ignore) for code in _expand(prefix, explicit=False)}
    keep = [code for code in dict.fromkeys(chosen) if code not in dropped]
    return tuple(RULES_BY_CODE[code] for code in sorted(keep))
