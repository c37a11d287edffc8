"""The CLI surface is frozen: every command and option is listed in a golden file, so a change to
it is a deliberate, reviewed change (torchtitan's test_no_new_cli_options)."""

from __future__ import annotations

import subprocess
import sys
import time

import typer.main

from gpudoctor.cli.app import app


def _describe(command, prefix: str) -> list[str]:
    # duck-typed: newer typer vendors click as typer._click, older ones use click itself
    lines = []
    if hasattr(command, "commands"):
        for name in sorted(command.commands):
            lines += _describe(command.commands[name], f"{prefix} {name}")
        return lines
    params = []
    for param in command.params:
        if getattr(param, "param_type_name", "") == "option":
            params.append("/".join(sorted(param.opts + param.secondary_opts)))
        else:
            params.append(f"<{param.name}{'...' if param.nargs == -1 else ''}>")
    lines.append(f"{prefix}: {' '.join(params)}".rstrip())
    return lines


def test_cli_surface(golden) -> None:
    root = typer.main.get_command(app)
    golden("cli_surface.txt", "\n".join(_describe(root, "gpudoctor")) + "\n")


def test_import_and_help_touch_no_gpu_and_are_fast() -> None:
    code = (
        "import sys, time; t=time.perf_counter(); import gpudoctor, gpudoctor.cli.app; "
        "bad=[m for m in ('torch','pynvml','plotly','jinja2','libcst','prometheus_client') "
        "if m in sys.modules]; "
        "assert not bad, bad; print(time.perf_counter()-t)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert float(out.stdout) < 1.5, f"import took {out.stdout}s"
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "--help"], capture_output=True, text=True
    )
    elapsed = time.perf_counter() - start
    assert result.returncode == 0, result.stderr
    assert "check" in result.stdout
    assert elapsed < 5.0, f"gpudoctor --help took {elapsed:.1f}s"
