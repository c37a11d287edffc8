"""Lint output formats: text (``path:line:col CODE message``), JSON, SARIF 2.1.0, GitHub Actions
annotations and JUnit XML (ruff's ``--output-format`` names)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from gpudoctor import __version__
from gpudoctor.lint.registry import RULES_BY_CODE
from gpudoctor.records.base import SCHEMA_VERSION, to_dict
from gpudoctor.records.lint import LintReport, LintViolation

FORMATS = ("text", "json", "sarif", "github", "junit")
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_SARIF_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def place(v: LintViolation) -> str:
    """``path:line:col``, or ``nb.ipynb:cells[3]:2:5`` in a notebook (0-based cell index, line in the cell)."""
    cell = "" if v.cell is None else f"cells[{v.cell}]:"
    return f"{v.path}:{cell}{v.line}:{v.col}"


def to_text(report: LintReport) -> str:
    """One ``path:line:col CODE message`` line per violation, then a one-line summary."""
    lines = [f"{place(v)} {v.code} {v.message}" for v in report.violations]
    count = len(report.violations)
    fixable = sum(v.fixable for v in report.violations)
    if count:
        summary = f"Found {count} violation{'s' * (count != 1)} in {report.files_checked} file" \
                  f"{'s' * (report.files_checked != 1)}."
        if fixable:
            summary += f" {fixable} fixable with `gpudoctor lint --fix`."
    else:
        summary = f"All checks passed ({report.files_checked} file{'s' * (report.files_checked != 1)})."
    if report.fixed:
        summary = f"Fixed {report.fixed} violation{'s' * (report.fixed != 1)}. " + summary
    unwritten = sum(v.code == "E902" for v in report.violations)
    if unwritten:
        summary += f" {unwritten} file{'s' * (unwritten != 1)} could not be written (E902): left unchanged."
    return "\n".join(lines + [summary]) + "\n"


def to_json(report: LintReport) -> str:
    payload = {"schema_version": SCHEMA_VERSION, **to_dict(report)}
    return json.dumps(payload, indent=2) + "\n"


def _uri(path: str) -> str:
    p = Path(path)
    return p.as_posix() if not p.is_absolute() else p.as_uri()


def to_sarif(report: LintReport) -> str:
    """A SARIF 2.1.0 log: one run, every known rule in ``tool.driver.rules``, one result per violation."""
    codes = sorted(RULES_BY_CODE)
    rules = []
    for code in codes:
        rule = RULES_BY_CODE[code]
        rules.append({
            "id": code,
            "name": rule.NAME,
            "shortDescription": {"text": rule.MESSAGE},
            "fullDescription": {"text": rule.RATIONALE},
            "help": {"text": rule.RATIONALE, "markdown": f"Bad:\n```python\n{rule.BAD}```\nGood:\n```python\n{rule.GOOD}```"},
            "defaultConfiguration": {"level": _SARIF_LEVEL[rule.SEVERITY],
                                     "enabled": not code.startswith("GD9")},
            "properties": {"fixable": rule.FIXABLE},
        })
    results = []
    for v in report.violations:
        result = {
            "ruleId": v.code,
            "level": _SARIF_LEVEL.get(v.severity, "warning"),
            "message": {"text": v.message},
            "locations": [{"physicalLocation": {
                "artifactLocation": {"uri": _uri(v.path)},
                "region": {"startLine": v.line, "startColumn": v.col},
            }}],
        }
        if v.code in RULES_BY_CODE:
            result["ruleIndex"] = codes.index(v.code)
        results.append(result)
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "gpudoctor", "version": __version__, "rules": rules}},
            "results": results,
        }],
    }
    return json.dumps(log, indent=2) + "\n"


def _gh_escape(text: str, *, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def to_github(report: LintReport) -> str:
    """GitHub Actions workflow commands: one ``::error``/``::warning``/``::notice`` per violation."""
    level = {"error": "error", "warning": "warning", "info": "notice"}
    lines = [f"::{level.get(v.severity, 'warning')} title={_gh_escape('gpudoctor ' + v.code, prop=True)},"
             f"file={_gh_escape(v.path, prop=True)},line={v.line},col={v.col}::"
             f"{_gh_escape(f'{place(v)}: {v.code} {v.message}')}" for v in report.violations]
    return "".join(line + "\n" for line in lines)


class JUnitCase(NamedTuple):
    """One ``<testcase>``: its failures as (message, type, text), or a skip reason."""

    classname: str
    name: str
    failures: tuple[tuple[str, str, str], ...] = ()
    skipped: str | None = None


def junit_xml(suite: str, cases: list[JUnitCase], *, empty: JUnitCase | None = None) -> str:
    """A JUnit XML document of one test suite (what CI systems read: GitLab, Jenkins, Azure,
    GitHub test reporters). ``failures`` counts the ``<failure>`` elements; ``empty`` stands in
    for no case at all (a suite with zero tests is shown as an error by some readers)."""
    from xml.sax.saxutils import escape, quoteattr

    shown = cases or ([empty] if empty is not None else [])
    total = sum(len(c.failures) for c in shown)
    skipped = sum(c.skipped is not None for c in shown)
    lines = []
    for case in shown:
        head = f"    <testcase classname={quoteattr(case.classname)} name={quoteattr(case.name)}"
        inner = "".join(f"\n      <failure message={quoteattr(message)} type={quoteattr(kind)}>{escape(text)}</failure>"
                        for message, kind, text in case.failures)
        if case.skipped is not None:
            inner += f"\n      <skipped message={quoteattr(case.skipped)}/>"
        lines.append(f"{head}>{inner}\n    </testcase>" if inner else f"{head}/>")
    skips = f' skipped="{skipped}"' if skipped else ""
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<testsuites name={quoteattr(suite)} tests="{len(shown)}" failures="{total}">\n'
            f'  <testsuite name={quoteattr(suite)} tests="{len(shown)}" failures="{total}" errors="0"{skips}>\n'
            + "".join(line + "\n" for line in lines)
            + "  </testsuite>\n</testsuites>\n")


def to_junit(report: LintReport) -> str:
    """JUnit XML: one test case per file with violations, one ``<failure>`` per violation."""
    by_file: dict[str, list] = {}
    for v in report.violations:
        by_file.setdefault(v.path, []).append(v)
    cases = [JUnitCase("gpudoctor.lint", path, tuple(
        (f"{v.code} {v.message}", v.code, f"{place(v)} {v.code} {v.message}") for v in found))
        for path, found in by_file.items()]
    return junit_xml("gpudoctor lint", cases, empty=JUnitCase("gpudoctor.lint", "all files"))


def render(report: LintReport, fmt: str) -> str:
    """Render ``report`` as ``text``, ``json``, ``sarif``, ``github`` or ``junit``."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    return {"text": to_text, "json": to_json, "sarif": to_sarif, "github": to_github,
            "junit": to_junit}[fmt](report)
