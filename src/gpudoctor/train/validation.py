"""Type checks for the configuration dataclasses, from their annotations.

Every field is checked at construction (Python and files alike): ``bool`` is not an ``int``
(``batch_size=True`` is refused), an ``int`` field takes no float (``grad_accum_steps=2.5``), a
``float`` field takes ints but no NaN or infinity, a ``Literal`` takes one of its strings, a
section takes its dataclass (a string where ``[precision]`` belongs says how to write it), and a
``tuple[str, ...]`` takes a list or tuple of strings (lists are stored as tuples). Each error
names the key, the value and what is accepted.
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
from typing import Any, Literal

_SECTION_HINT = {  # what a person most likely meant by a plain value where a section belongs
    "precision": "dtype", "parallel": "strategy", "checkpoint": "dir",
}


def check_fields(obj: Any, prefix: str) -> None:
    """Check (and normalise: list -> tuple, path -> str) every field of the dataclass ``obj``."""
    hints = typing.get_type_hints(type(obj))
    for field in dataclasses.fields(obj):
        key, value = prefix + field.name, getattr(obj, field.name)
        fixed = _check(key, value, hints[field.name])
        if fixed is not value:
            object.__setattr__(obj, field.name, fixed)


def _check(key: str, value: Any, hint: Any) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        errors = []
        for option in options:
            try:
                return _check(key, value, option)
            except ValueError as exc:
                errors.append(exc)
        if len(options) == 1:
            raise _with_none(errors[0], type(None) in args)
        raise ValueError(f"{key}={value!r}: expected {' or '.join(_describe(o) for o in options)}"
                         + (" or leave it out" if type(None) in args else ""))
    if origin is Literal:
        if isinstance(value, str) and value in args:
            return value
        raise ValueError(f"{key}={value!r} is not valid; use one of: {', '.join(map(str, args))}")
    if origin is tuple:
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ValueError(f"{key}={value!r}: expected a list of names, e.g. [\"Block\"] (a tuple in Python)")
    if dataclasses.is_dataclass(hint):
        if isinstance(value, hint):
            return value
        name = hint.__name__
        meant = _SECTION_HINT.get(key)
        example = (f"; e.g. {key}={name}({meant}={value!r}) in Python, or [{key}] {meant} = {value!r} in a file"
                   if meant and isinstance(value, str) else "")
        kind = type(value).__name__
        article = "an" if kind[0] in "aeiou" else "a"
        raise ValueError(f"{key}={value!r} is {article} {kind} but {key} is a section: give a {name} "
                         f"(a [{key}] table in a file){example}")
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ValueError(f"{key}={value!r}: expected true or false")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ValueError(f"{key}={value!r}: expected a whole number (int)" +
                         (", not a bool" if isinstance(value, bool) else ""))
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise ValueError(f"{key}={value!r}: expected a finite number (not NaN or infinity)")
            return value
        raise ValueError(f"{key}={value!r}: expected a number" + (", not a bool" if isinstance(value, bool) else ""))
    if hint is str:
        if isinstance(value, str):
            return value
        if isinstance(value, os.PathLike):
            return os.fspath(value)
        raise ValueError(f"{key}={value!r}: expected a string")
    return value  # pragma: no cover - every annotation in config.py is handled above


def _describe(hint: Any) -> str:
    return {int: "a whole number", float: "a number", str: "a string", bool: "true or false"}.get(hint, str(hint))


def _with_none(exc: ValueError, optional: bool) -> ValueError:
    return ValueError(f"{exc} or leave it out (None)") if optional else exc
