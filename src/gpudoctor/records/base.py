"""The record convention: frozen, slotted, keyword-only dataclasses of standard-library types.

Every record round-trips through JSON: ``from_dict(Cls, to_dict(obj)) == obj``. Units live in
field names (``mem_used_bytes``, ``step_ms``). A field a collector could not measure is ``None``,
and the reason goes into a sibling ``*_reason`` field or an ``unavailable`` mapping — never a crash.

Files written from records carry ``schema_version`` (``SCHEMA_VERSION`` below); readers refuse a
newer major version with a clear message instead of misreading it.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from gpudoctor.records.atomic import write_text_atomic

SCHEMA_VERSION = 1

T = TypeVar("T")


def record(cls: type[T]) -> type[T]:
    """Make ``cls`` a record: ``@dataclass(frozen=True, slots=True, kw_only=True)``."""
    return dataclasses.dataclass(frozen=True, slots=True, kw_only=True)(cls)


class SchemaError(ValueError):
    """A file or mapping does not match the record it should hold."""


class NewerSchemaError(SchemaError):
    """A file written by a newer gpudoctor: not damaged, and the message says to upgrade."""


def to_dict(obj: Any) -> Any:
    """Turn a record (or a nested structure of records) into JSON-ready plain data."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, float) and obj != obj:  # NaN is not JSON; keep it readable and lossless
        return "NaN"
    if isinstance(obj, float) and obj in (float("inf"), float("-inf")):
        return "Infinity" if obj > 0 else "-Infinity"
    return obj


_FLOAT_WORDS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def from_dict(cls: type[T], data: Any) -> T:
    """Build a record of type ``cls`` from plain data made by :func:`to_dict`.

    Unknown keys are ignored (newer minor versions may add fields); a missing required field
    raises :class:`SchemaError` naming the record and the field.
    """
    return _convert(cls, data, where=getattr(cls, "__name__", str(cls)))


def _hints(cls: type) -> dict[str, Any]:
    cache = _HINTS.get(cls)
    if cache is None:
        cache = typing.get_type_hints(cls)
        _HINTS[cls] = cache
    return cache


_HINTS: dict[type, dict[str, Any]] = {}


def _convert(tp: Any, data: Any, *, where: str) -> Any:
    if tp is Any:
        return data
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if data is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, data, where=where)
            except (SchemaError, TypeError, ValueError) as exc:
                errors.append(str(exc))
        raise SchemaError(f"{where}: {data!r} fits none of {tp} ({'; '.join(errors)})")
    if origin in (list, tuple, Iterable):
        args = typing.get_args(tp)
        if not isinstance(data, (list, tuple)):
            raise SchemaError(f"{where}: expected a list, got {type(data).__name__}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            items = [_convert(a, v, where=where) for a, v in zip(args, data)]
        else:
            item_type = args[0] if args else Any
            items = [_convert(item_type, v, where=where) for v in data]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        key_type, value_type = typing.get_args(tp) or (Any, Any)
        if not isinstance(data, dict):
            raise SchemaError(f"{where}: expected a mapping, got {type(data).__name__}")
        return {
            _convert(key_type, k, where=where): _convert(value_type, v, where=where)
            for k, v in data.items()
        }
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(data, dict):
            raise SchemaError(f"{where}: expected a mapping for {tp.__name__}, got {data!r}")
        hints = _hints(tp)
        kwargs = {}
        for field in dataclasses.fields(tp):
            if field.name in data:
                kwargs[field.name] = _convert(
                    hints[field.name], data[field.name], where=f"{tp.__name__}.{field.name}"
                )
            elif (
                field.default is dataclasses.MISSING
                and field.default_factory is dataclasses.MISSING
            ):
                raise SchemaError(f"{tp.__name__}: required field {field.name!r} is missing")
        return tp(**kwargs)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(data)
        except ValueError as exc:
            raise SchemaError(f"{where}: {exc}") from None
    if tp is float:
        if isinstance(data, str) and data in _FLOAT_WORDS:
            return _FLOAT_WORDS[data]
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise SchemaError(f"{where}: expected a number, got {data!r}")
        return float(data)
    if tp is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise SchemaError(f"{where}: expected an integer, got {data!r}")
        return data
    if tp is bool:
        if not isinstance(data, bool):
            raise SchemaError(f"{where}: expected true/false, got {data!r}")
        return data
    if tp is str:
        if not isinstance(data, str):
            raise SchemaError(f"{where}: expected a string, got {data!r}")
        return data
    return data


def dumps(obj: Any) -> str:
    """One record as one line of JSON (for JSONL files)."""
    return json.dumps(to_dict(obj), separators=(",", ":"), allow_nan=False)


def write_json(path: Path, obj: Any, *, kind: str) -> None:
    """Write ``obj`` as a JSON document with ``schema_version`` and ``kind`` at the top.

    Written atomically (:func:`gpudoctor.records.atomic.write_text_atomic`), so a reader never
    sees half a file.
    """
    payload = {"schema_version": SCHEMA_VERSION, "kind": kind, "data": to_dict(obj)}
    write_text_atomic(Path(path), json.dumps(payload, indent=2, allow_nan=False) + "\n")


def _text(path: Path) -> str:
    """``path``'s text; bytes that are not UTF-8 (a damaged or foreign file) raise SchemaError
    naming the file and the offset, never a bare UnicodeDecodeError."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SchemaError(f"{path}: not valid UTF-8 text at byte {exc.start} (a damaged file, or "
                          "not a gpudoctor record)") from None


def read_json(path: Path, cls: type[T], *, kind: str) -> T:
    """Read a document written by :func:`write_json` back into a ``cls`` record."""
    try:
        payload = json.loads(_text(path))
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{path}: not valid JSON ({exc}); the file may be truncated") from None
    _check_header(payload, path=path, kind=kind)
    return from_dict(cls, payload["data"])


def _check_header(payload: Any, *, path: Path, kind: str) -> None:
    if not isinstance(payload, dict) or "schema_version" not in payload:
        raise SchemaError(f"{path}: no schema_version; this is not a gpudoctor file")
    version = payload["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool):
        raise SchemaError(f"{path}: schema_version {version!r} is not a number; this is not a gpudoctor file")
    if version > SCHEMA_VERSION:
        raise NewerSchemaError(
            f"{path}: schema_version {version!r} is newer than this gpudoctor understands "
            f"({SCHEMA_VERSION}); upgrade gpudoctor to read it"
        )
    if payload.get("kind") != kind:
        raise SchemaError(f"{path}: holds {payload.get('kind')!r}, expected {kind!r}")


class JsonlWriter:
    """Append records to a JSON Lines file, one record a line, flushed as it goes.

    The first line is a header ``{"schema_version": 1, "kind": ...}``, so a crash loses at most
    the line being written.
    """

    def __init__(self, path: Path, *, kind: str) -> None:
        self.path = path
        new = not path.exists() or path.stat().st_size == 0
        self._file = path.open("a", encoding="utf-8")
        if new:
            self._file.write(json.dumps({"schema_version": SCHEMA_VERSION, "kind": kind}) + "\n")
            self._file.flush()

    def write(self, obj: Any) -> None:
        self._file.write(dumps(obj) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_jsonl(path: Path, cls: type[T], *, kind: str) -> Iterator[T]:
    """Yield the records of a file written by :class:`JsonlWriter`.

    A last line cut off by a crash is skipped; any other bad line raises :class:`SchemaError`
    with its line number.
    """
    lines = _text(path).splitlines()
    if not lines:
        return
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError:
        raise SchemaError(f"{path}:1: the header line is not JSON") from None
    _check_header(header, path=path, kind=kind)
    last = len(lines) - 1
    for number, line in enumerate(lines[1:], start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            if number == last:
                return  # a line cut off by a crash or Ctrl-C
            raise SchemaError(f"{path}:{number + 1}: not valid JSON") from None
        yield from_dict(cls, data)
