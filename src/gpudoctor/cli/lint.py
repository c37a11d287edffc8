"""``gpudoctor lint PATH...``: static check for GPU-training anti-patterns (ruff's conventions)."""

from __future__ import annotations

from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def lint(
        paths: Optional[list[str]] = typer.Argument(
            None, metavar="PATH", help="Files or directories to check (default: .); `-` reads one file from stdin."),
        select: Optional[list[str]] = typer.Option(
            None, "--select", metavar="CODES", help="Only these codes or prefixes, e.g. GD1,GD302 (GD9xx rules are off unless selected)."),
        ignore: Optional[list[str]] = typer.Option(None, "--ignore", metavar="CODES", help="Skip these codes or prefixes."),
        fix: bool = typer.Option(False, "--fix", help="Rewrite the safely fixable violations in place (atomically)."),
        diff: bool = typer.Option(False, "--diff", help="Show what --fix would change, as a unified diff; write nothing."),
        output_format: str = typer.Option(
            "text", "--output-format", "--format", metavar="FORMAT", help="Output format: text, json, sarif, github or junit."),
        statistics: bool = typer.Option(False, "--statistics", help="Show a count per code instead of each violation."),
        json_output: bool = typer.Option(False, "--json", help="Print JSON (same as --output-format json)."),
        exit_zero: bool = typer.Option(False, "--exit-zero", help="Exit 0 even when violations are found."),
        stdin_filename: Optional[str] = typer.Option(
            None, "--stdin-filename", metavar="NAME", help="The name to report (and match per-file-ignores) for stdin input."),
        no_config: bool = typer.Option(False, "--isolated", help="Ignore [tool.gpudoctor.lint] in pyproject.toml."),
    ) -> None:
        """Check Python files and shell launch scripts for GPU-training anti-patterns.

        Static: nothing is imported or run. Settings come from [tool.gpudoctor.lint] in the nearest
        pyproject.toml; `# noqa: GD502` silences one line. `gpudoctor explain GD502` shows a rule.

        Exit codes (ruff's convention): 0 no violation (or --exit-zero); 1 violations found; 2
        usage or input error; 130 interrupted.

        \b
        Examples:
          gpudoctor lint
          gpudoctor lint train.py scripts/ --select GD1,GD502
          gpudoctor lint --diff train.py
          gpudoctor lint --fix train.py
          gpudoctor lint --output-format github src/
        """
        from gpudoctor.cli.output import EXIT_FINDINGS, EXIT_OK
        from gpudoctor.errors import GpuDoctorUserError
        from gpudoctor.lint import FORMATS, render
        from gpudoctor.lint.config import LintConfig, find_config
        from gpudoctor.lint.engine import run_lint, run_stdin

        fmt = "json" if json_output else output_format.lower()
        if fmt not in FORMATS:
            raise GpuDoctorUserError(f"unknown --output-format {output_format!r}: use one of {', '.join(FORMATS)}")
        config = LintConfig() if no_config else find_config()
        paths = paths or ["."]
        try:
            if paths == ["-"]:
                run = run_stdin(stdin_filename or "-", select=select, ignore=ignore, fix=fix, diff=diff, config=config)
            elif "-" in paths:
                raise GpuDoctorUserError("`-` (stdin) cannot be mixed with other paths: pass it alone")
            else:
                run = run_lint(paths, select=select, ignore=ignore, fix=fix and not diff, diff=diff, config=config)
        except ModuleNotFoundError as exc:
            raise GpuDoctorUserError(f"--fix/--diff need libcst ({exc}): pip install libcst") from exc
        report = run.report
        to_err = diff or run.stdout is not None  # stdout carries the diff or the fixed source
        if diff:
            typer.echo("".join(run.diffs), nl=False)
        elif run.stdout is not None:
            typer.echo(run.stdout, nl=False)
        if statistics and fmt == "text":
            from gpudoctor.report.lint_view import statistics_text

            typer.echo(statistics_text(report), nl=False, err=to_err)
        else:
            typer.echo(render(report, fmt), nl=False, err=to_err)
        raise typer.Exit(EXIT_OK if exit_zero or not report.violations else EXIT_FINDINGS)
