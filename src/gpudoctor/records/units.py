"""Binary size units and how sizes are written for people, the same in every layer (stdlib only).

The one place for ``KIB``/``MIB``/``GIB``, the one byte formatter and the one spelling of a value
that was not measured (``MISSING``).
"""

from __future__ import annotations

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30

MISSING = "n/a"
"""What a view prints where a value was not measured or does not apply."""


def human_bytes(n: float | None, digits: int = 1) -> str:
    """Bytes in binary units with ``digits`` decimals (``1.5 GiB``); ``MISSING`` for ``None``."""
    if n is None:
        return MISSING
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.{digits}f} {unit}"
        value /= 1024
    return f"{value:.{digits}f} GiB"  # pragma: no cover - loop always returns


def gib_number(n: float | None, digits: int = 1) -> str:
    """Bytes as a bare number of GiB, for a column whose header names the unit; ``MISSING``."""
    return MISSING if n is None else f"{n / GIB:.{digits}f}"


def figure(value: float | None, unit: str = "") -> str:
    """A measured figure to about three significant digits (``784``, ``55.5``, ``0.93``;
    thousands separated: ``38,298``), ``unit`` appended; ``MISSING`` for ``None``."""
    if value is None:
        return MISSING
    if abs(value) >= 100:
        return f"{value:,.0f}{unit}"
    if abs(value) >= 10:
        return f"{value:.1f}{unit}"
    return f"{value:.2f}{unit}"


__all__ = ["GIB", "KIB", "MIB", "MISSING", "figure", "gib_number", "human_bytes"]
