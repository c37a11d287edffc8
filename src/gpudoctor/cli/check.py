"""``gpudoctor check`` (being built: see issue 2)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def check(json_output: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
        """Check the GPU stack layer by layer."""
        typer.echo("check: not built yet")
