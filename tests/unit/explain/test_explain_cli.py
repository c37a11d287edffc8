"""``gpudoctor explain`` end to end: input forms, exit codes, JSON, and golden renderings."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

from gpudoctor.cli.app import app
from gpudoctor.explain import explain_text
from gpudoctor.report.explain_view import render_explain

from .conftest import EXPLAIN_FIXTURES, fixture_text

runner = CliRunner()
FRAG = ("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.78 GiB. GPU 0 has a "
        "total capacity of 31.47 GiB of which 12.73 GiB is free. Of the allocated memory 9.08 GiB is "
        "allocated by PyTorch, and 9.35 GiB is reserved by PyTorch but unallocated.")


def _render(text: str) -> str:
    buffer = io.StringIO()
    render_explain(explain_text(text), Console(file=buffer, width=100, color_system=None))
    return buffer.getvalue()


@pytest.mark.parametrize("case", sorted(p.stem for p in EXPLAIN_FIXTURES.glob("*.log")))
def test_rendered_fixture_matches_golden(case: str, golden) -> None:
    golden(f"explain/{case}.txt", _render(fixture_text(f"{case}.log")))


def test_rendered_single_message_matches_golden(golden) -> None:
    golden("explain/single_oom_fragmentation.txt", _render(FRAG))


def test_links_and_fix_lines_copy_whole_at_80_columns() -> None:
    """URLs and commands are not folded at the width: each is one line that copies whole."""
    buffer = io.StringIO()
    render_explain(explain_text(FRAG), Console(file=buffer, width=80, color_system=None))
    lines = buffer.getvalue().splitlines()
    url = "https://pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf"
    assert any(line.endswith(f"• {url}") for line in lines)
    assert any(line.endswith("• export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PyTorch >= 2.1) before "
                             "the process starts") for line in lines)


def test_message_argument_matches_and_exits_1() -> None:
    """A known failure matched is a finding: exit 1 (the contract); --fail-on never makes it 0."""
    result = runner.invoke(app, ["explain", FRAG])
    assert result.exit_code == 1, result.output
    assert "oom-fragmentation" in result.output
    assert "expandable_segments:True" in result.output


def test_file_argument(tmp_path) -> None:
    log = tmp_path / "train.log"
    log.write_text(fixture_text("ddp_oom_rank3_watchdog.log"), encoding="utf-8")
    result = runner.invoke(app, ["explain", str(log)])
    assert result.exit_code == 1, result.output
    assert "torchrun: rank 3 failed first (exitcode 1)" in result.output


def test_stdin_dash() -> None:
    result = runner.invoke(app, ["explain", "-"], input=fixture_text("dataloader_bus_error.log"))
    assert result.exit_code == 1, result.output
    assert "dataloader-shared-memory" in result.output


def test_unknown_text_exits_0_and_shows_the_extraction() -> None:
    result = runner.invoke(app, ["explain", "-"], input=fixture_text("unknown_keyerror.log"))
    assert result.exit_code == 0
    assert "no known failure matched" in result.output
    assert "KeyError: '480p'" in result.output


@pytest.mark.parametrize("arg", ["missing/train.log", "nope.log"])
def test_missing_file_is_a_usage_error(arg: str) -> None:
    result = runner.invoke(app, ["explain", arg])
    assert result.exit_code == 2
    assert "no such file" in result.output


def test_directory_and_empty_input_are_usage_errors(tmp_path) -> None:
    assert runner.invoke(app, ["explain", str(tmp_path)]).exit_code == 2
    assert runner.invoke(app, ["explain", "-"], input="  \n").exit_code == 2


def test_json_output() -> None:
    result = runner.invoke(app, ["explain", "--json", "-"],
                           input=fixture_text("ddp_oom_rank3_watchdog.log"))
    assert result.exit_code == 1, result.output
    payload = json.loads(result.output)
    assert payload["kind"] == "explain" and payload["schema_version"] >= 1
    report = payload["report"]
    assert [m["entry_id"] for m in report["matches"]] == ["oom-fragmentation", "nccl-watchdog-timeout"]
    first = report["matches"][0]
    assert first["role"] == "root" and first["ranks"] == [3] and first["confidence"] >= 0.9
    assert first["verify"] and first["fix"] and first["links"]
    assert report["launcher"]["rank"] == 3
    assert report["ranks_seen"] == [0, 1, 2, 3]


def test_json_unknown_exits_0() -> None:
    result = runner.invoke(app, ["explain", "--json", "KeyError: 'image_id'"])
    assert result.exit_code == 0
    payload = json.loads(result.output)
    assert payload["report"]["matches"] == []
    assert payload["report"]["extracted"][0]["exception_type"] == "KeyError"


@pytest.mark.parametrize(("fail_on", "code"), [("info", 1), ("warn", 1), ("error", 1), ("never", 0)])
def test_fail_on_thresholds_an_error_entry(fail_on: str, code: int) -> None:
    result = runner.invoke(app, ["explain", "--fail-on", fail_on, FRAG])
    assert result.exit_code == code, result.output


def test_fail_on_error_passes_a_warning_entry() -> None:
    """A catalog entry of severity "warning" exits 1 at the default threshold, 0 at --fail-on error."""
    from gpudoctor.explain import explain_text, load_catalog

    entry = next(e for e in load_catalog().entries if e.severity == "warning")
    text = entry.samples[0].text
    assert [m.severity for m in explain_text(text).matches] == ["warning"]
    assert runner.invoke(app, ["explain", text]).exit_code == 1
    assert runner.invoke(app, ["explain", "--fail-on", "error", text]).exit_code == 0
