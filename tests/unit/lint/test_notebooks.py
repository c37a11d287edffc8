"""Notebooks: code cells are linted, magics kept out of the parser, findings at cell:line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpudoctor.errors import GpuDoctorUserError
from gpudoctor.lint.engine import discover, lint_paths
from gpudoctor.lint.formats import to_json, to_text
from gpudoctor.lint.notebook import notebook_code


def _notebook(path: Path, cells: list[tuple[str, str]]) -> Path:
    doc = {"cells": [{"cell_type": kind, "metadata": {}, "source": text.splitlines(keepends=True),
                      **({"outputs": [], "execution_count": None} if kind == "code" else {})}
                     for kind, text in cells],
           "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


CELLS = [
    ("markdown", "# Training\n"),
    ("code", "%matplotlib inline\n!pip install timm\nimport torch\nmodel = torch.nn.Linear(4, 2).cuda()\n"),
    ("markdown", "The loop:\n"),
    ("code", "%%time\ntotal = 0.0\nfor x, y in loader:\n    loss = crit(model(x), y)\n    loss.backward()\n"
             "    opt.step()\n    total += loss\n    torch.cuda.empty_cache()\n"),
    ("code", "%%bash\nnvidia-smi\n"),
]


def test_notebook_findings_are_reported_at_cell_and_line(tmp_path: Path) -> None:
    nb = _notebook(tmp_path / "train.ipynb", CELLS)
    report = lint_paths([nb], select=["GD201", "GD203"])
    found = [(v.code, v.cell, v.line) for v in report.violations]
    assert found == [("GD201", 3, 7), ("GD203", 3, 8)]
    text = to_text(report)
    assert f"{nb}:cells[3]:7:5 GD201" in text and "All checks passed" not in text
    assert [v["cell"] for v in json.loads(to_json(report))["violations"]] == [3, 3]


def test_folder_with_a_notebook_is_linted(tmp_path: Path) -> None:
    _notebook(tmp_path / "nb.ipynb", CELLS)
    assert [p.name for p in discover([tmp_path])] == ["nb.ipynb"]
    assert lint_paths([tmp_path], select=["GD203"]).violations


def test_magics_become_pass_and_keep_line_numbers() -> None:
    doc = json.dumps({"cells": [{"cell_type": "code", "source": ["for i in range(3):\n", "    %time f(i)\n",
                                                                   "files = !ls\n", "msg = ('%d'\n", "       % 3)"]}]})
    code = notebook_code(doc)
    compile(code.text, "nb", "exec")  # parses
    assert code.text.splitlines()[1] == "    pass  # %time f(i)"
    assert code.text.splitlines()[4] == "       % 3)"  # a continuation line, not a magic
    assert code.origin == ((0, 1), (0, 2), (0, 3), (0, 4), (0, 5))


def test_broken_notebook_is_an_error_not_a_pass(tmp_path: Path) -> None:
    bad = tmp_path / "bad.ipynb"
    bad.write_text("{not json", encoding="utf-8")
    (v,) = lint_paths([bad]).violations
    assert v.code == "E999" and "notebook" in v.message


def test_plain_file_violations_have_no_cell(tmp_path: Path) -> None:
    f = tmp_path / "t.py"
    f.write_text("import torch\nfor x in loader:\n    loss = m(x)\n    loss.backward()\n    opt.step()\n"
                 "    torch.cuda.empty_cache()\n", encoding="utf-8")
    (v,) = lint_paths([f], select=["GD203"]).violations
    assert v.cell is None and f"{f}:6:5 GD203" in to_text(lint_paths([f], select=["GD203"]))


def test_unreadable_folder_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def walk(top, onerror=None, **_):
        onerror(PermissionError(13, "Permission denied", str(top)))
        return iter(())

    monkeypatch.setattr(os, "walk", walk)
    with pytest.raises(GpuDoctorUserError, match="cannot be read"):
        discover([tmp_path])
