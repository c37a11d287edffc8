"""Reading and writing the files lint checks, without surprises.

- Only regular files are read: a FIFO, socket or device named ``*.py`` is skipped (reading a FIFO
  would block forever).
- Text is decoded with the file's own encoding (PEP 263 cookie or BOM, UTF-8 by default).
- ``--fix`` writes atomically (:mod:`gpudoctor.records.atomic`: a temporary file in the same
  folder, flushed and fsynced, then ``os.replace`` over the original), with the original's
  permission bits, its encoding, its BOM and its line endings (CRLF stays CRLF). A file that
  cannot be written is reported and the others go on.
"""

from __future__ import annotations

import codecs
import io
import os
import stat
import tokenize
from dataclasses import dataclass
from pathlib import Path

from gpudoctor.records.atomic import write_bytes_atomic


@dataclass(frozen=True)
class SourceFile:
    """A file's text (newlines as ``\\n``) and how to write it back byte-for-byte alike."""

    text: str
    encoding: str
    newline: str  # "\n", "\r\n" or "\r": the file's first line ending
    bom: bool


def is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def decode(data: bytes) -> SourceFile:
    """Decode Python source bytes; raises ``SyntaxError``/``UnicodeDecodeError``/``LookupError``."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    bom = data.startswith(codecs.BOM_UTF8)
    raw = data[len(codecs.BOM_UTF8):] if bom else data
    text = raw.decode("utf-8" if encoding == "utf-8-sig" else encoding)
    newline = "\n"
    for i, ch in enumerate(text):
        if ch == "\r":
            newline = "\r\n" if text[i + 1:i + 2] == "\n" else "\r"
            break
        if ch == "\n":
            break
    return SourceFile(text=text, encoding="utf-8" if encoding == "utf-8-sig" else encoding,
                      newline=newline, bom=bom)


def read_source(path: Path) -> SourceFile:
    return decode(path.read_bytes())


def encode(original: SourceFile, new_text: str) -> bytes:
    """``new_text`` (which uses the original's line endings or ``\\n``) as the original's bytes."""
    if original.newline != "\n":
        new_text = new_text.replace("\r\n", "\n").replace("\r", "\n").replace("\n", original.newline)
    data = new_text.encode(original.encoding)
    return codecs.BOM_UTF8 + data if original.bom else data


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` in one step; the original is untouched if anything fails."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if not os.access(path, os.W_OK):
        raise PermissionError(f"{path} is not writable")
    write_bytes_atomic(path, data, mode=mode)
