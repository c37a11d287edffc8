"""``gpudoctor bench`` on the command line (CPU paths for real, at tiny sizes)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from gpudoctor.cli.app import app

runner = CliRunner()


def _json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_matmul_json_on_cpu() -> None:
    data = _json(runner.invoke(app, ["bench", "matmul", "--sizes", "64", "--json"]))
    assert [(r["dtype"], r["verdict"]) for r in data["results"]] == [("fp32", "unjudged"), ("bf16", "unjudged")]
    assert data["gpu_count"] == 0
    assert any("no CUDA GPU visible" in s["reason"] for s in data["skipped"])


def test_copy_text_on_cpu() -> None:
    result = runner.invoke(app, ["bench", "copy", "--sizes", "1M"])
    assert result.exit_code == 0, result.output
    assert "host_memcpy" in result.stdout and "read + written" in result.stdout


def test_all_on_cpu_says_what_it_skipped(monkeypatch) -> None:
    launched = {}

    def fake_launch(nproc, **kwargs):  # the real torchrun path is tests/distributed/test_bench_collectives.py
        launched.update(nproc=nproc, **kwargs)
        return [], []

    monkeypatch.setattr("gpudoctor.bench.collectives.launch_collectives", fake_launch)
    data = _json(runner.invoke(app, ["bench", "all", "--sizes", "64,1M", "--json"]))
    assert launched["nproc"] == 2 and launched["ops"] == ("all_reduce",)
    assert {r["op"] for r in data["results"]} == {"matmul", "host_memcpy"}
    reasons = " ".join(s["reason"] for s in data["skipped"])
    assert "only all_reduce in `bench all`" in reasons and "no dataset given" in reasons


def test_loader_from_a_script(tmp_path) -> None:
    script = tmp_path / "ds.py"
    script.write_text("import torch\ndataset = torch.utils.data.TensorDataset(torch.zeros(128, 2))\n")
    data = _json(runner.invoke(
        app, ["bench", "loader", "--dataset", str(script), "--workers", "0", "--batch-size", "8", "--json"]
    ))
    (r,) = data["results"]
    assert r["section"] == "loader" and r["size"] == "workers=0" and r["median"] > 0


def test_low_figure_exits_1(monkeypatch, gpu_report) -> None:
    monkeypatch.setattr("gpudoctor.bench.suite.run_bench", lambda options, progress=None: gpu_report)
    result = runner.invoke(app, ["bench", "all"])
    assert result.exit_code == 1
    assert "LOW" in result.stdout and "11 figures: 6 normal, 3 low, 2 unjudged" in result.stdout


@pytest.mark.parametrize("args,message", [
    (["bench", "disk"], "choose one of"),
    (["bench", "matmul", "--dtypes", "bf61"], "bf61 unknown"),
    (["bench", "collectives", "--nproc", "1"], "at least 2 processes"),
    (["bench", "loader", "--workers", "a,b"], "whole numbers"),
    (["bench", "copy", "--sizes", "1Q"], "is not a size"),
])
def test_bad_input_is_a_user_error(args, message) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and result.stdout == ""


def test_user_error_exits_2_with_the_fix() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "bench", "matmul", "--sizes", "1Q"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "buffer sizes with a unit" in proc.stderr and proc.stdout == ""
