"""Jupyter notebooks: their code cells as one Python text, and findings mapped back to cell:line.

The code cells are joined in order (a loop in one cell calls a helper defined in another, as in
real notebooks), so every rule sees the notebook as the script it is. IPython syntax that is not
Python keeps its line: a line magic or shell line (``%time``, ``!pip``, ``x = !ls``) becomes
``pass`` at its indentation, and a cell magic other than the Python-running ones (``%%bash``,
``%%writefile``) blanks its whole cell. Findings are reported at the notebook's path with the
0-based index into its ``cells`` list (markdown cells included) and the 1-based line in the cell.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace

from gpudoctor.records.lint import LintViolation

SUFFIX = ".ipynb"
# cell magics whose body is still Python run in the kernel
_PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug", "memit", "px", "autoreload"})
_MAGIC = re.compile(r"^(\s*)(?:%[A-Za-z%]|!(?!=)|\w[\w\s,]*=\s*(?:%[A-Za-z]|!(?!=)))")


@dataclass(frozen=True)
class NotebookCode:
    """The joined code of a notebook and, per joined line (0-based), its (cell index, line in cell)."""

    text: str
    origin: tuple[tuple[int, int], ...]


def _cell_lines(cell: dict) -> list[str]:
    source = cell.get("source", "")
    text = "".join(source) if isinstance(source, list) else str(source)
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _python_line(line: str) -> str:
    match = _MAGIC.match(line)
    if match is None:
        return line
    return f"{match.group(1)}pass  # {line.strip()}"


def notebook_code(data: str) -> NotebookCode:
    """The code cells of a notebook's JSON text; raises ``ValueError`` when it is not a notebook."""
    try:
        doc = json.loads(data)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not a notebook: the JSON does not parse ({exc.msg}, line {exc.lineno})") from exc
    cells = doc.get("cells") if isinstance(doc, dict) else None
    if not isinstance(cells, list):
        raise ValueError("not a notebook: no `cells` list")
    lines: list[str] = []
    origin: list[tuple[int, int]] = []
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        body = _cell_lines(cell)
        first = body[0].strip() if body else ""
        magic = first[2:].split()[0] if first.startswith("%%") and len(first) > 2 else None
        for number, line in enumerate(body, start=1):
            if magic is not None and (number == 1 or magic not in _PYTHON_CELL_MAGICS):
                line = ""  # the magic line itself, or a cell in another language
            lines.append(_python_line(line))
            origin.append((index, number))
    return NotebookCode(text="\n".join(lines) + "\n", origin=tuple(origin))


def to_cells(found: list[LintViolation], code: NotebookCode) -> list[LintViolation]:
    """Violations on the joined text, placed at their cell and line within it (not fixable:
    ``--fix`` does not rewrite notebooks)."""
    out = []
    for v in found:
        if not code.origin:
            out.append(replace(v, line=1, cell=None, fixable=False))
            continue
        cell, line = code.origin[min(max(v.line, 1), len(code.origin)) - 1]
        out.append(replace(v, line=line, cell=cell, fixable=False))
    return out
