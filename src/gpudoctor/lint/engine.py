"""Walk paths, parse each file once, run the selected rules, apply ``# noqa``, optionally fix.

A file that cannot be read or parsed yields one ``E999`` violation for that file; the other
files are still checked. Rules share one :class:`~gpudoctor.lint.scope.FileContext` per file.
"""

from __future__ import annotations

import ast
import difflib
import os
import re
from dataclasses import dataclass, field
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from gpudoctor.errors import GpuDoctorUserError
from gpudoctor.lint.config import LintConfig
from gpudoctor.lint.notebook import SUFFIX as NOTEBOOK, notebook_code, to_cells
from gpudoctor.lint.fileio import SourceFile, decode, encode, is_regular, read_source, write_atomic
from gpudoctor.lint.project import project_mentions, torch_ceiling, torch_floor
from gpudoctor.lint.registry import select_rules
from gpudoctor.lint.rule_run import noqa_map, run_rule, silenced
from gpudoctor.lint.shell import lint_shell
from gpudoctor.lint.walker import build_context
from gpudoctor.records.lint import LintReport, LintViolation

PARSE_ERROR = "E999"
WRITE_ERROR = "E902"
SUFFIXES = (".py", ".sh", NOTEBOOK)
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".venv", "venv", "env", ".tox", ".nox",
                       "node_modules", "build", "dist", "site-packages", ".mypy_cache", ".pytest_cache",
                       ".ruff_cache", ".eggs"})
_LINES = re.compile(r"\r\n|\r|\n")


def discover(paths: Sequence[str | Path], config: LintConfig | None = None) -> list[Path]:
    """Files to check under ``paths``, sorted, skipping hidden and build folders, ``exclude``d
    paths and anything that is not a regular file (a FIFO named ``x.py`` would block the read).
    Files named on the command line are taken whatever their suffix.

    Raises:
        GpuDoctorUserError: a path does not exist, or a named path is not a regular file.
    """
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            below: list[Path] = []
            # os.walk prunes skipped directories instead of listing them, and never follows
            # symlinked directories (no cycles)
            def unreadable(exc: OSError, top: Path = path) -> None:
                if Path(exc.filename or "") == top:  # the folder named itself: say so, not "0 files"
                    raise GpuDoctorUserError(f"folder {str(raw)!r} cannot be read ({exc.strerror}): "
                                             "check its permissions") from exc

            for root, dirs, files in os.walk(path, onerror=unreadable):
                dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")
                           and not (config and config.excluded(Path(root) / d))]
                below += [Path(root) / name for name in files if name.endswith(SUFFIXES)]
            found += sorted(below, key=lambda p: p.relative_to(path).parts)
        elif path.exists() or path.is_symlink():
            if not is_regular(path):
                raise GpuDoctorUserError(
                    f"path {str(raw)!r} is not a regular file (a FIFO, device or broken/looping symlink):"
                    " pass Python files, notebooks or directories")
            found.append(path)
        else:
            raise GpuDoctorUserError(f"path {str(raw)!r} does not exist: pass existing files or directories")
    return [p for p in dict.fromkeys(found) if is_regular(p) and not (config and config.excluded(p))]


def _column(lines: list[str], line: int, col_offset: int) -> int:
    """1-based character column from ast's byte offset."""
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    if text.isascii():
        return col_offset + 1
    return len(text.encode("utf-8")[:col_offset].decode("utf-8", errors="ignore")) + 1


def lint_source(source: str, path: str, rules: Sequence[ModuleType], *,
                torch_floor: tuple[int, ...] | None = None, cv2_threads_elsewhere: bool = False,
                torch_ceiling: tuple[int, ...] | None = None) -> list[LintViolation]:
    """Lint one file's text with ``rules``; never raises for bad input. ``torch_floor`` is the
    project's lowest supported torch, ``torch_ceiling`` its exclusive upper bound (a pin), and ``cv2_threads_elsewhere`` whether another file of the
    project calls ``cv2.setNumThreads`` (see :mod:`gpudoctor.lint.project`)."""
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
    ctx.torch_floor = torch_floor
    ctx.torch_ceiling = torch_ceiling
    ctx.cv2_threads_elsewhere = cv2_threads_elsewhere
    rules = [rule for rule in rules if getattr(rule, "KIND", "py") == "py"]
    noqa = noqa_map(lines)
    out: list[LintViolation] = []
    seen: set[tuple[int, int, str]] = set()
    for rule in rules:
        hits, failed = run_rule(rule, ctx, path)
        if failed is not None:
            out.append(failed)
        for hit in hits:
            node = hit.node
            line, end = node.lineno, getattr(node, "end_lineno", None) or node.lineno
            col = _column(lines, line, node.col_offset)
            key = (line, col, rule.CODE)
            if key in seen or silenced(noqa, rule.CODE, {line, end}):
                continue
            seen.add(key)
            out.append(LintViolation(path=path, line=line, col=col, code=rule.CODE,
                                     message=hit.message or rule.MESSAGE, severity=rule.SEVERITY,
                                     fixable=rule.FIXABLE))
    return sorted(out, key=lambda v: (v.line, v.col, v.code))


def _floor(source: str, path: str, config: LintConfig) -> tuple[int, ...] | None:
    if config.target_torch is not None:
        return config.target_torch
    if "torch" not in source or ("load" not in source and "amp" not in source):
        return None  # only GD601 and GD301 read it: skip the folder walk
    return torch_floor(path)


def _ceiling(source: str, path: str, config: LintConfig) -> tuple[int, ...] | None:
    if config.target_torch is not None or "torch" not in source or "amp" not in source:
        return None  # only GD301 reads it
    return torch_ceiling(path)


def lint_text(source: str, path: str, rules: Sequence[ModuleType], config: LintConfig) -> list[LintViolation]:
    """Lint one file's text with the config's per-file ignores and torch floor applied."""
    skip = config.ignored_for(Path(path)) if config.per_file_ignores else ()
    chosen = [r for r in rules if not any(r.CODE.startswith(code) for code in skip)]
    if path.endswith(".sh"):
        return lint_shell(source, path, [r for r in chosen if getattr(r, "KIND", "py") == "sh"])
    python = [r for r in chosen if getattr(r, "KIND", "py") == "py"]
    # only GD105 reads it, and only for a file using cv2 without setting its threads itself
    cv2_elsewhere = ("cv2" in source and "setNumThreads" not in source and "num_workers" in source
                     and any(r.CODE == "GD105" for r in python) and project_mentions(path, "setNumThreads"))
    return lint_source(source, path, python, torch_floor=_floor(source, path, config),
                       cv2_threads_elsewhere=cv2_elsewhere, torch_ceiling=_ceiling(source, path, config))


@dataclass
class LintRun:
    """A lint run's report and, with ``diff=True``, the unified diff of what ``--fix`` would change."""

    report: LintReport
    diffs: list[str] = field(default_factory=list)
    files_fixed: int = 0
    stdout: str | None = None  # stdin with --fix: the fixed source


def run_stdin(name: str, *, select: Sequence[str] | None = None, ignore: Sequence[str] | None = None,
              fix: bool = False, diff: bool = False, config: LintConfig | None = None) -> LintRun:
    """Lint the source read from stdin, reported as ``name`` (``--stdin-filename``); with ``fix``
    the fixed source is returned in ``stdout`` (nothing is written to disk)."""
    from gpudoctor.core.stdin import read_stdin_bytes

    config = config or LintConfig()
    try:
        rules = select_rules(select or config.select or None, ignore or config.ignore or None)
    except ValueError as exc:
        raise GpuDoctorUserError(str(exc)) from exc
    data = read_stdin_bytes("pass the files to check instead: gpudoctor lint train.py")
    run = LintRun(report=LintReport(files_checked=1))
    if name != "-" and config.excluded(Path(name)):
        run.report = LintReport(files_checked=0)
        return run
    try:
        original = decode(data)
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
        bad = LintViolation(path=name, line=1, col=1, code=PARSE_ERROR, severity="error",
                            message=f"could not read stdin ({exc.__class__.__name__}: {exc})")
        run.report = LintReport(files_checked=1, violations=(bad,))
        return run
    found = lint_text(original.text, name, rules, config)
    fixed = 0
    if (fix or diff) and any(v.fixable for v in found):
        from gpudoctor.lint.fix import apply_fixes

        text = original.text.replace("\r\n", "\n").replace("\r", "\n")
        new_text = apply_fixes(text, [v for v in found if v.fixable])
        if diff:
            run.diffs.append("".join(difflib.unified_diff(text.splitlines(keepends=True),
                                                          new_text.splitlines(keepends=True), f"a/{name}", f"b/{name}")))
        else:
            after = lint_text(new_text, name, rules, config)
            fixed = sum(v.fixable for v in found) - sum(v.fixable for v in after)
            found = after
            run.stdout = encode(original, new_text).decode(original.encoding)
    elif fix:
        run.stdout = original.text
    run.report = LintReport(files_checked=1, violations=tuple(found), fixed=fixed)
    return run


def lint_paths(paths: Sequence[str | Path], *, select: Sequence[str] | None = None,
               ignore: Sequence[str] | None = None, fix: bool = False, diff: bool = False,
               config: LintConfig | None = None) -> LintReport:
    """Lint every Python file under ``paths`` (see :func:`run_lint` for the arguments)."""
    return run_lint(paths, select=select, ignore=ignore, fix=fix, diff=diff, config=config).report


def run_lint(paths: Sequence[str | Path], *, select: Sequence[str] | None = None,
             ignore: Sequence[str] | None = None, fix: bool = False, diff: bool = False,
             config: LintConfig | None = None) -> LintRun:
    """Lint every Python file (and shell launch script) under ``paths``.

    Args:
        paths: files and directories.
        select: rule codes or prefixes to run (default: the config's, else all outside GD9xx).
        ignore: codes or prefixes to skip (default: the config's).
        fix: rewrite the files for fixable violations (needs libcst), atomically, keeping
            encoding and line endings; a file that cannot be written is reported as ``E902``.
        diff: with ``fix``, collect the unified diff instead of writing.
        config: ``[tool.gpudoctor.lint]`` settings (default: none).

    Raises:
        GpuDoctorUserError: a path does not exist, or a code/prefix matches no rule.
    """
    config = config or LintConfig()
    try:
        rules = select_rules(select or config.select or None, ignore or config.ignore or None)
    except ValueError as exc:
        raise GpuDoctorUserError(str(exc)) from exc
    files = discover(paths, config)
    run = LintRun(report=LintReport(files_checked=len(files)))
    violations: list[LintViolation] = []
    fixed = 0
    for file in files:
        path = str(file)
        if path.endswith(NOTEBOOK):
            violations += lint_notebook(file, rules, config)
            continue
        try:
            original = read_source(file)
        except (OSError, SyntaxError, UnicodeDecodeError, LookupError) as exc:
            violations.append(LintViolation(path=path, line=1, col=1, code=PARSE_ERROR, severity="error",
                                            message=f"could not read the file ({exc.__class__.__name__}: {exc})"))
            continue
        found = lint_text(original.text, path, rules, config)
        if (fix or diff) and any(v.fixable for v in found):
            found, count = _fix_file(file, original, found, rules, config, run, diff)
            fixed += count
        violations += found
    run.report = LintReport(files_checked=len(files), violations=tuple(violations), fixed=fixed)
    return run


def lint_notebook(file: Path, rules: Sequence[ModuleType], config: LintConfig) -> list[LintViolation]:
    """Lint a notebook's code cells (see :mod:`gpudoctor.lint.notebook`); ``--fix`` leaves it alone."""
    path = str(file)
    try:
        code = notebook_code(file.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return [LintViolation(path=path, line=1, col=1, code=PARSE_ERROR, severity="error",
                              message=f"could not read the notebook ({exc.__class__.__name__}: {exc})")]
    return to_cells(lint_text(code.text, path, rules, config), code)


def _fix_file(file: Path, original: SourceFile, found: list[LintViolation], rules: Sequence[ModuleType],
              config: LintConfig, run: LintRun, diff: bool) -> tuple[list[LintViolation], int]:
    from gpudoctor.lint.fix import apply_fixes

    path = str(file)
    text = original.text.replace("\r\n", "\n").replace("\r", "\n")
    new_text = apply_fixes(text, [v for v in found if v.fixable])
    if new_text == text:
        return found, 0
    after = lint_text(new_text, path, rules, config)
    count = sum(v.fixable for v in found) - sum(v.fixable for v in after)
    if diff:
        run.diffs.append("".join(difflib.unified_diff(
            text.splitlines(keepends=True), new_text.splitlines(keepends=True), f"a/{path}", f"b/{path}")))
        return found, 0
    try:
        write_atomic(file, encode(original, new_text))
    except (OSError, UnicodeEncodeError) as exc:
        note = LintViolation(path=path, line=1, col=1, code=WRITE_ERROR, severity="error",
                             message=f"--fix could not write the file ({exc.__class__.__name__}: {exc}); "
                                     "it is unchanged: make it writable and re-run")
        return [note, *found], 0
    run.files_fixed += 1
    return after, count
