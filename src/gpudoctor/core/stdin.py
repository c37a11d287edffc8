"""Reading a command's input from stdin, with a clear error when there is none to read."""

from __future__ import annotations

import sys

from gpudoctor.errors import GpuDoctorUserError


def read_stdin_bytes(example: str) -> bytes:
    """All of stdin as bytes; a closed stdin (``cmd <&-``, a daemon) raises a user error that
    says how to pass the input instead (``example``)."""
    stream = sys.stdin
    if stream is None or getattr(stream, "closed", False):
        raise GpuDoctorUserError(f"stdin is closed, so there is nothing to read; {example}")
    try:
        return stream.buffer.read() if hasattr(stream, "buffer") else stream.read().encode()
    except (OSError, ValueError) as exc:
        raise GpuDoctorUserError(f"cannot read stdin ({exc}); {example}") from None


def stdin_is_terminal() -> bool:
    """True when stdin is an interactive terminal (and so holds no piped input)."""
    stream = sys.stdin
    return stream is not None and not getattr(stream, "closed", False) and stream.isatty()
