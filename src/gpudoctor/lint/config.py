"""``[tool.gpudoctor.lint]`` in pyproject.toml, with ruff's names and meanings.

    [tool.gpudoctor.lint]
    select = ["GD"]                 # codes or prefixes (default: every rule outside GD9xx)
    ignore = ["GD104"]
    exclude = ["third_party/**"]    # globs, matched against paths relative to the config's folder
    per-file-ignores = {"tests/**" = ["GD601"], "scripts/bench.py" = ["GD502"]}
    target-torch = "2.6"            # lowest torch the code runs on (else read from requirements)

The nearest pyproject.toml with a ``[tool.gpudoctor.lint]`` table at or above the working folder
is used; command-line ``--select``/``--ignore`` replace the table's. Stdlib only (``tomllib``).
"""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from gpudoctor.analysis.env_text import version_parts
from gpudoctor.errors import GpuDoctorUserError

KEYS = frozenset({"select", "ignore", "exclude", "extend-exclude", "per-file-ignores", "target-torch"})


@dataclass(frozen=True)
class LintConfig:
    """The settings of one lint run; ``root`` is the folder globs are relative to."""

    root: Path = field(default_factory=Path.cwd)
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    target_torch: tuple[int, ...] | None = None
    source: Path | None = None  # the pyproject.toml it came from

    def _relative(self, path: Path) -> str:
        try:
            return PurePosixPath(path.resolve().relative_to(self.root.resolve())).as_posix()
        except (ValueError, OSError):
            return PurePosixPath(path).as_posix()

    def excluded(self, path: Path) -> bool:
        rel = self._relative(path)
        parts = rel.split("/")
        return any(fnmatch.fnmatch(rel, pat) or fnmatch.fnmatch(parts[-1], pat)
                   or any(fnmatch.fnmatch("/".join(parts[:i]), pat.rstrip("/")) for i in range(1, len(parts)))
                   for pat in self.exclude)

    def ignored_for(self, path: Path) -> tuple[str, ...]:
        """Codes or prefixes switched off for ``path`` by ``per-file-ignores``."""
        rel = self._relative(path)
        name = rel.rsplit("/", 1)[-1]
        out: list[str] = []
        for pattern, codes in self.per_file_ignores:
            if fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(name, pattern):
                out += codes
        return tuple(out)


def _codes(value: object, key: str, where: Path) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise GpuDoctorUserError(f"{where}: [tool.gpudoctor.lint] {key} must be a list of strings, e.g. [\"GD1\"]")
    return tuple(v.strip().upper() if key != "exclude" else v for v in value)


def find_config(start: Path | None = None) -> LintConfig:
    """The nearest ``[tool.gpudoctor.lint]`` at or above ``start`` (default: the working folder)."""
    folder = (start or Path.cwd()).resolve()
    for candidate in (folder, *folder.parents):
        file = candidate / "pyproject.toml"
        try:
            if not file.is_file():
                continue
            data = tomllib.loads(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise GpuDoctorUserError(f"could not read {file} ({exc}): fix the file or run from another folder") from exc
        table = data.get("tool", {}).get("gpudoctor", {}).get("lint")
        if table is not None:
            return load_table(table, file)
    return LintConfig(root=folder)


def load_table(table: dict, file: Path) -> LintConfig:
    unknown = sorted(set(table) - KEYS)
    if unknown:
        raise GpuDoctorUserError(f"{file}: unknown key(s) {unknown} in [tool.gpudoctor.lint]; "
                                 f"known: {', '.join(sorted(KEYS))}")
    pfi = table.get("per-file-ignores", {})
    if not isinstance(pfi, dict):
        raise GpuDoctorUserError(f"{file}: per-file-ignores must be a table of glob = [codes]")
    target = table.get("target-torch")
    if target is not None and (not isinstance(target, str) or not version_parts(target)):
        raise GpuDoctorUserError(f"{file}: target-torch must be a version string such as \"2.6\"")
    return LintConfig(
        root=file.parent,
        select=_codes(table.get("select", []), "select", file),
        ignore=_codes(table.get("ignore", []), "ignore", file),
        exclude=_codes(table.get("exclude", []), "exclude", file) + _codes(
            table.get("extend-exclude", []), "exclude", file),
        per_file_ignores=tuple((glob, _codes(codes, "per-file-ignores", file)) for glob, codes in pfi.items()),
        target_torch=version_parts(target) if target else None,
        source=file,
    )
