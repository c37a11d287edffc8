"""The cost block (``--price-per-gpu-hour``) of a recorded run: ``gpudoctor diagnose`` states the
cost per 1,000 steps and the waste of the top finding, in the terminal (goldens at 80 and 120
columns), in ``--json`` and in the HTML report; a bad price is a usage error (exit 2)."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from gpudoctor.analysis.cost import run_cost
from gpudoctor.analysis.diagnose import diagnose
from gpudoctor.analysis.facts import run_facts
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.cli.app import app
from gpudoctor.cli.pricing import PRICE_ENV
from gpudoctor.records.rundir import load_run
from gpudoctor.report.cost_view import money, render_cost

RUNS = Path(__file__).resolve().parents[2] / "fixtures" / "runs"
runner = CliRunner()


@pytest.fixture
def basic_user(tmp_path: Path) -> Path:
    path = tmp_path / "basic_user"
    shutil.copytree(RUNS / "basic_user", path)  # diagnose rewrites findings.json
    return path


def _cost(name: str, price: float = 2.5):
    run = load_run(RUNS / name)
    findings = diagnose(run)
    return run_cost(run_facts(run, Thresholds()), findings, price), findings


def test_money_keeps_three_significant_figures_below_one() -> None:
    assert [money(v) for v in (0.0123456, 0.5, 1.234, 12.345, 1234.5, None)] == [
        "0.0123", "0.500", "1.23", "12.35", "1,234", "-"]


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("name", ["basic_user", "straggler-2gpu"])
def test_cost_block_fits_the_terminal(golden, name: str, width: int) -> None:
    cost, _ = _cost(name)
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(render_cost(cost))
    text = console.file.getvalue()
    assert max(len(line) for line in text.splitlines()) <= width
    golden(f"report/cost_{name}_{width}.txt", text)


def test_diagnose_states_the_cost_per_1000_steps_and_the_top_findings_waste(basic_user: Path) -> None:
    cost, findings = _cost("basic_user")
    top = findings[0]
    assert top.code == "GD-RUN-DATALOADER" and top.expected_gain
    result = runner.invoke(app, ["diagnose", str(basic_user), "--price-per-gpu-hour", "2.5"],
                           env={"COLUMNS": "80"})
    assert result.exit_code == 1, result.output  # a WARN finding, as without a price
    out = result.output
    assert "Cost at 2.5 per GPU-hour (1 GPU, mean step" in out
    assert f"per 1,000 steps            {money(cost.per_1k_steps)}" in out
    waste = cost.findings[0]
    assert waste.code == top.code
    assert f"{top.code} (78.3%)  wastes {money(waste.per_1k_steps)} per 1,000 steps" in out
    # 1,000 mean steps on one GPU at 2.5 per hour, and the finding's share of it
    assert cost.per_1k_steps == pytest.approx(1000 * cost.mean_step_ms / 3.6e6 * 2.5)
    assert waste.per_1k_steps == pytest.approx(top.expected_gain * cost.per_1k_steps)


def test_diagnose_json_has_a_cost_key_and_reads_the_environment(basic_user: Path) -> None:
    result = runner.invoke(app, ["diagnose", str(basic_user), "--json"], env={PRICE_ENV: "2.5"})
    data = json.loads(result.output)
    cost, _ = _cost("basic_user")
    assert data["cost"]["per_1k_steps"] == pytest.approx(cost.per_1k_steps)
    assert data["cost"]["findings"][0]["code"] == "GD-RUN-DATALOADER"
    assert data["cost"]["try_savings"] is None
    plain = runner.invoke(app, ["diagnose", str(basic_user), "--json"], env={PRICE_ENV: ""})
    assert "cost" not in json.loads(plain.output)


@pytest.mark.parametrize(("args", "env"), [
    (["--price-per-gpu-hour", "abc"], {}),
    (["--price-per-gpu-hour", "-1"], {}),
    (["--price-per-gpu-hour", "0"], {}),
    (["--price-per-gpu-hour", "nan"], {}),
    ([], {PRICE_ENV: "two"}),
])
def test_a_bad_price_is_a_usage_error(basic_user: Path, args: list[str], env: dict) -> None:
    for command in (["diagnose"], ["report"]):
        result = runner.invoke(app, command + [str(basic_user)] + args, env=env)
        assert result.exit_code == 2, result.output
        assert "price" in result.output.lower()


def test_the_html_report_has_the_cost_table(basic_user: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    result = runner.invoke(app, ["report", str(basic_user), "-o", str(out), "--price-per-gpu-hour", "2.5"])
    assert result.exit_code == 0, result.output
    html = out.read_text()
    cost, _ = _cost("basic_user")
    assert '<table id="cost">' in html
    assert f"<td>per 1,000 steps</td><td>{money(cost.per_1k_steps)}</td>" in html
    assert "GD-RUN-DATALOADER (78.3%)" in html
    plain = tmp_path / "plain.html"
    runner.invoke(app, ["report", str(basic_user), "-o", str(plain)])
    assert '<table id="cost">' not in plain.read_text()


def test_a_verified_try_shows_what_it_saves(golden) -> None:
    from gpudoctor.analysis.cost import try_savings
    from gpudoctor.analysis.try_compare import TryComparison, judge

    cost, _ = _cost("basic_user")
    j = judge([7000.0, 7100.0], [14000.0, 14200.0])
    comparison = TryComparison(knobs=("num_workers=8", "pin_memory"), unit="samples/s",
                               before={"throughput": 7050.0}, after={"throughput": 14100.0},
                               gain=j.gain, judgement=j)
    savings = try_savings(cost, comparison)
    console = Console(file=io.StringIO(), width=80, color_system=None)
    console.print(render_cost(cost, savings))
    text = console.file.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert f"saves {money(cost.per_1k_steps / 2)} per 1,000 steps" in text
    golden("report/cost_basic_user_try_80.txt", text)


def test_an_unverified_try_saves_nothing_in_the_block() -> None:
    cost, _ = _cost("basic_user")
    console = Console(file=io.StringIO(), width=80, color_system=None)
    console.print(render_cost(cost, None, ("num_workers=1",)))
    assert re.search(r"--try num_workers=1 +saves nothing verified: no gain above the noise", console.file.getvalue())
