"""Walk paths, parse each file once, run the selected rules, apply ``# noqa``, optionally fix.

A file that cannot be read or parsed yields one ``E999`` violation for that file; the other
files are still checked. Rules share one :class:`~gpudoctor.lint.scope.FileContext` per file.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType

from gpudoctor.errors import GpuDoctorUserError
from gpudoctor.lint.registry import select_rules
from gpudoctor.lint.walker import build_context
from gpudoctor.records.lint import LintReport, LintViolation

PARSE_ERROR = "E999"
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".venv", "venv", "env", ".tox", ".nox",
                       "node_modules", "build", "dist", "site-packages", ".mypy_cache", ".pytest_cache",
                       ".ruff_cache", ".eggs"})
_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)
_LINES = re.compile(r"\r\n|\r|\n")


def discover(paths: Sequence[str | Path]) -> list[Path]:
    """Python files under ``paths`` (files are taken as given), sorted, skipping hidden and build dirs.

    Raises:
        GpuDoctorUserError: a path does not exist.
    """
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            below: list[Path] = []
            # os.walk prunes skipped directories instead of listing them, and never follows
            # symlinked directories (no cycles)
            for root, dirs, files in os.walk(path):
                dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]
                below += [Path(root) / name for name in files if name.endswith(".py")]
            found += sorted(below, key=lambda p: p.relative_to(path).parts)
        else:
            raise GpuDoctorUserError(f"path {str(raw)!r} does not exist: pass existing files or directories")
    return list(dict.fromkeys(found))


def _noqa_map(lines: list[str]) -> dict[int, frozenset[str] | None]:
    """line -> codes silenced on it (``None`` for a bare ``# noqa``, which silences all)."""
    out: dict[int, frozenset[str] | None] = {}
    for number, line in enumerate(lines, start=1):
        if "noqa" not in line.lower():
            continue
        match = _NOQA.search(line)
        if match:
            codes = match.group("codes")
            out[number] = frozenset(re.split(r"[\s,]+", codes.upper())) if codes else None
    return out


def _silenced(noqa: dict[int, frozenset[str] | None], code: str, lines: Iterable[int]) -> bool:
    for line in lines:
        if line in noqa:
            codes = noqa[line]
            if codes is None or code in codes:
                return True
    return False


def _column(lines: list[str], line: int, col_offset: int) -> int:
    """1-based character column from ast's byte offset."""
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    if text.isascii():
        return col_offset + 1
    return len(text.encode("utf-8")[:col_offset].decode("utf-8", errors="ignore")) + 1


def lint_source(source: str, path: str, rules: Sequence[ModuleType]) -> list[LintViolation]:
    """Lint one file's text with ``rules``; never raises for bad input."""
    lines = _LINES.split(source)
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None) or 1
        col = getattr(exc, "offset", None) or 1
        reason = getattr(exc, "msg", None) or str(exc)
        return [LintViolation(path=path, line=line, col=col, code=PARSE_ERROR, severity="error",
                              message=f"SyntaxError: {reason} (file not checked; fix it and re-run)")]
    ctx = build_context(path, source, tree)
    noqa = _noqa_map(lines)
    out: list[LintViolation] = []
    seen: set[tuple[int, int, str]] = set()
    for rule in rules:
        try:
            hits = list(rule.check(ctx))
        except Exception as exc:  # a rule bug must not hide the other rules' results
            out.append(LintViolation(path=path, line=1, col=1, code=rule.CODE, severity="error",
                                     message=f"internal error in rule {rule.CODE}: {exc!r}; please report it"))
            continue
        for hit in hits:
            node = hit.node
            line, end = node.lineno, getattr(node, "end_lineno", None) or node.lineno
            col = _column(lines, line, node.col_offset)
            key = (line, col, rule.CODE)
            if key in seen or _silenced(noqa, rule.CODE, {line, end}):
                continue
            seen.add(key)
            out.append(LintViolation(path=path, line=line, col=col, code=rule.CODE,
                                     message=hit.message or rule.MESSAGE, severity=rule.SEVERITY,
                                     fixable=rule.FIXABLE))
    return sorted(out, key=lambda v: (v.line, v.col, v.code))


def lint_paths(paths: Sequence[str | Path], *, select: Sequence[str] | None = None,
               ignore: Sequence[str] | None = None, fix: bool = False) -> LintReport:
    """Lint every Python file under ``paths``.

    Args:
        paths: files and directories.
        select: rule codes or prefixes to run (default: all outside GD9xx).
        ignore: codes or prefixes to skip.
        fix: rewrite the files in place for fixable violations (needs libcst).

    Raises:
        GpuDoctorUserError: a path does not exist, or a code/prefix matches no rule.
    """
    try:
        rules = select_rules(select, ignore)
    except ValueError as exc:
        raise GpuDoctorUserError(str(exc)) from exc
    files = discover(paths)
    violations: list[LintViolation] = []
    fixed = 0
    for file in files:
        path = str(file)
        try:
            source = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            violations.append(LintViolation(path=path, line=1, col=1, code=PARSE_ERROR, severity="error",
                                            message=f"could not read the file as UTF-8 ({exc.__class__.__name__})"))
            continue
        found = lint_source(source, path, rules)
        if fix and any(v.fixable for v in found):
            from gpudoctor.lint.fix import apply_fixes

            new_source = apply_fixes(source, [v for v in found if v.fixable])
            if new_source != source:
                file.write_text(new_source, encoding="utf-8")
                after = lint_source(new_source, path, rules)
                fixed += sum(v.fixable for v in found) - sum(v.fixable for v in after)
                found = after
        violations += found
    return LintReport(files_checked=len(files), violations=tuple(violations), fixed=fixed)
