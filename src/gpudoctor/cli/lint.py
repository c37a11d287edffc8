"""``gpudoctor lint PATH...``: static check for GPU-training anti-patterns."""

from __future__ import annotations

from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def lint(
        paths: Optional[list[str]] = typer.Argument(None, help="Files or directories to check (default: .)."),
        select: Optional[list[str]] = typer.Option(
            None, "--select", help="Only these codes or prefixes, e.g. GD1,GD302 (GD9xx rules are off unless selected)."),
        ignore: Optional[list[str]] = typer.Option(None, "--ignore", help="Skip these codes or prefixes."),
        fix: bool = typer.Option(False, "--fix", help="Rewrite the safely fixable violations in place."),
        output_format: str = typer.Option("text", "--format", help="Output format: text, json or sarif."),
        statistics: bool = typer.Option(False, "--statistics", help="Show a count per code instead of each violation."),
        json_output: bool = typer.Option(False, "--json", help="Print JSON (same as --format json)."),
    ) -> None:
        """Check Python files for GPU-training anti-patterns (exit 1 when anything is found)."""
        from gpudoctor.cli.output import EXIT_FINDINGS, EXIT_OK
        from gpudoctor.errors import GpuDoctorUserError
        from gpudoctor.lint import FORMATS, lint_paths, render

        fmt = "json" if json_output else output_format.lower()
        if fmt not in FORMATS:
            raise GpuDoctorUserError(f"unknown --format {output_format!r}: use one of {', '.join(FORMATS)}")
        try:
            report = lint_paths(paths or ["."], select=select, ignore=ignore, fix=fix)
        except ModuleNotFoundError as exc:
            raise GpuDoctorUserError(f"--fix needs libcst ({exc}): pip install libcst") from exc
        if statistics and fmt == "text":
            from gpudoctor.report.lint_view import statistics_text

            typer.echo(statistics_text(report), nl=False)
        else:
            typer.echo(render(report, fmt), nl=False)
        raise typer.Exit(EXIT_FINDINGS if report.violations else EXIT_OK)
