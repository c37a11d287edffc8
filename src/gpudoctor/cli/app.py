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
    "gpudoctor.cli.fix",
    "gpudoctor.cli.diagnose",
    "gpudoctor.cli.report",
    "gpudoctor.cli.memory",
    "gpudoctor.cli.monitor",
    "gpudoctor.cli.bench",
    "gpudoctor.cli.lint",
    "gpudoctor.cli.explain",
    "gpudoctor.cli.tune",
)


# One line each in `gpudoctor --help` (the docstrings' first sentences are cut at 80 columns).
SHORT_HELP = {
    "doctor": "The full check-up: check, run, diagnose, prove the fix, report.",
    "check": "Check the GPU stack layer by layer; say how to fix it.",
    "run": "Run a training command under the probes and diagnose it.",
    "fix": "Patch a script from its findings; keep what measured faster.",
    "diagnose": "Re-analyse a recorded run directory.",
    "report": "Render a run directory as an offline HTML report.",
    "monitor": "Watch and log GPU and host use.",
    "bench": "Measure this machine's matmul, copy and collective ceilings.",
    "lint": "Find GPU-training anti-patterns in code, statically.",
    "explain": "Explain an error or a log: cause, how to verify, the fix.",
    "tune": "Tune batch, loader, precision, scaler and DDP by measuring.",
    "memory": "Estimate, record and explain training memory.",
}


class _Root(typer.core.TyperGroup):
    """The root group: a user error anywhere below becomes a clear message and exit code 2; a
    command that needs the torch extra says so when torch is missing (:mod:`gpudoctor.cli.extras`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name, command in self.commands.items():
            command.short_help = SHORT_HELP.get(name, command.short_help)
        from gpudoctor.cli.extras import guard_torch_commands

        guard_torch_commands(self)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except GpuDoctorUserError as exc:
            _usage_error(str(exc))
        except UnicodeDecodeError as exc:  # a record or text input with bytes that are not UTF-8
            _usage_error(f"an input file is not valid UTF-8 text ({exc.reason} at byte {exc.start}): "
                         "pass a gpudoctor record or text file, or re-create the damaged file")
        except BrokenPipeError:  # the reader of our output went away (| head): not bad input
            raise
        except OSError as exc:  # unreadable input, unwritable output, closed stdin
            where = f" {exc.filename!r}" if exc.filename else ""
            _usage_error(f"cannot use{where}: {exc.strerror or exc}: check the path exists and is "
                         "readable (inputs) or writable (outputs)")
        except ModuleNotFoundError as exc:  # torch imported somewhere not guarded up front
            if (exc.name or "").partition(".")[0] != "torch":
                raise
            from gpudoctor.cli.extras import missing_torch_message

            _usage_error(missing_torch_message(ctx.invoked_subcommand or "this command"))


def _usage_error(message: str):
    from rich.text import Text

    from gpudoctor.cli.output import EXIT_USAGE, stderr_console

    stderr_console().print(Text.assemble(("error:", "bold red"), " ", message))
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
    # click's plain help: paragraphs reflowed to the terminal, \b blocks (Examples) kept verbatim,
    # no type noise after flags, [brackets] shown as written
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
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
