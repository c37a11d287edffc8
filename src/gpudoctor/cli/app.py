"""The root ``gpudoctor`` command. Each sub-command lives in its own module with a ``register``
function; heavy imports (torch, NVML, plotting) happen inside the commands, never here, so
``gpudoctor --help`` stays fast and touches no GPU."""

from __future__ import annotations

import importlib
import sys

import typer
import typer.core

from gpudoctor import __version__
from gpudoctor.errors import GpuDoctorUserError

# Command modules, in the order ``--help`` lists them. Each defines ``register(app)``.
COMMAND_MODULES = (
    "gpudoctor.cli.doctor",
    "gpudoctor.cli.check",
    "gpudoctor.cli.run",
    "gpudoctor.cli.diagnose",
    "gpudoctor.cli.report",
    "gpudoctor.cli.memory",
    "gpudoctor.cli.monitor",
    "gpudoctor.cli.bench",
    "gpudoctor.cli.lint",
    "gpudoctor.cli.explain",
    "gpudoctor.cli.tune",
)


class _Root(typer.core.TyperGroup):
    """The root group: a user error anywhere below becomes a clear message and exit code 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except GpuDoctorUserError as exc:
            from gpudoctor.cli.output import EXIT_USAGE, stderr_console

            stderr_console().print(f"[bold red]error:[/] {exc}", highlight=False)
            raise typer.Exit(EXIT_USAGE) from None


app = typer.Typer(
    cls=_Root,
    name="gpudoctor",
    help=(
        "Find out why PyTorch training on NVIDIA GPUs is slow, runs out of memory, produces NaN "
        "or hangs under DDP — measured, explained, and fixed."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpudoctor {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """gpudoctor: measure, explain and fix PyTorch GPU training."""


for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
