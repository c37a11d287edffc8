"""How sizes are written for people, the same in every layer (stdlib only)."""

from __future__ import annotations


def human_bytes(n: float | None) -> str:
    """Bytes in binary units with one decimal (``1.5 GiB``); ``n/a`` for ``None``."""
    if n is None:
        return "n/a"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"  # pragma: no cover - loop always returns


__all__ = ["human_bytes"]
