"""``gpudoctor report RUNDIR``: render a run directory as one self-contained HTML file."""

from __future__ import annotations

from pathlib import Path

import typer

from gpudoctor.cli.pricing import price_option


def register(app: typer.Typer) -> None:
    @app.command()
    def report(
        run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="A run directory made by `gpudoctor run` or `doctor`."),
        output: Path = typer.Option(
            None, "--out", "-o", help="Where to write the HTML (default: RUNDIR/report.html)."
        ),
        output_old: Path = typer.Option(None, "--output", hidden=True, help="The earlier name of --out."),
        json_output: bool = typer.Option(False, "--json", help="Print the report's path as JSON."),
        price: float = price_option(),
    ) -> None:
        """Render RUN_DIR as one self-contained HTML report that works offline.

        The verdict and findings as cards (evidence, fix, expected gain), GPU utilization, memory
        and power over time, the step-time breakdown and allocator memory per step and rank, the
        environment check and the run's configuration. Findings are re-analysed when the run
        directory has none or today's analysis did not make them, so the report shows what
        `gpudoctor diagnose` prints; findings.json is left as it is. Needs no torch.

        \b
        Examples:
          gpudoctor report gpudoctor-runs/20261201-101500-train
          gpudoctor report RUN_DIR -o report.html
          gpudoctor report RUN_DIR --price-per-gpu-hour 2.5   # adds the cost table
        """
        from gpudoctor.cli.diagnose import current_findings, load
        from gpudoctor.cli.output import emit_json, pick_out, stdout_console
        from gpudoctor.report.html import write_report

        output = pick_out(output, output_old, "--output")
        from gpudoctor.cli.progress import Progress

        with Progress() as progress:  # stderr: charts and analysis take seconds
            progress.stage(f"reading and analysing {run_dir}")
            run = load(run_dir)  # one route: diagnose's errors and advice
            findings = current_findings(run)
            if output is not None and output.is_dir():
                output = output / "report.html"
            progress.stage("drawing the charts and writing the HTML")
            path = write_report(run, findings, output, price_per_gpu_hour=price)
        if json_output:
            emit_json({"report": str(path), "size_bytes": path.stat().st_size})
        else:
            stdout_console().print(f"report written to [bold]{path}[/]", highlight=False)
