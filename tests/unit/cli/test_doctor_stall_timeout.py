"""``doctor --stall-timeout``: the option the stall message tells people to raise exists on doctor
too and reaches the run it supervises."""

from __future__ import annotations

import sys
import types

import pytest
from typer.testing import CliRunner

import gpudoctor.analysis.env_rules as env_rules
import gpudoctor.collectors.env as env_mod
import gpudoctor.collectors.launch as launch
from gpudoctor.cli import doctor
from gpudoctor.cli.app import app
from gpudoctor.records.env import CheckReport


class _Stop(Exception):
    pass


def _doctor(args, tmp_path, monkeypatch):
    """doctor with the check and the run stubbed: returns the RunSpec its run stage got."""
    seen = []

    def run_instrumented(spec, **_):
        seen.append(spec)
        raise _Stop

    monkeypatch.setattr(env_mod, "gather_facts", lambda **_: types.SimpleNamespace(devices=()))
    monkeypatch.setattr(env_rules, "check_env",
                        lambda facts: CheckReport(results=(), summary="", duration_ms=0.0))
    monkeypatch.setattr(launch, "run_instrumented", run_instrumented)
    script = tmp_path / "hang.py"
    script.write_text("import time\ntime.sleep(600)\n")
    result = CliRunner().invoke(app, ["doctor", "--json", "-o", str(tmp_path / "out"), *args,
                                      sys.executable, str(script)])
    return result, seen


def test_doctor_passes_stall_timeout_to_its_run(tmp_path, monkeypatch):
    result, seen = _doctor(["--stall-timeout", "300"], tmp_path, monkeypatch)
    assert isinstance(result.exception, _Stop), result.output
    assert seen[0].stall_timeout_s == 300


def test_doctor_stall_timeout_defaults_to_runs(tmp_path, monkeypatch):
    result, seen = _doctor([], tmp_path, monkeypatch)
    assert isinstance(result.exception, _Stop), result.output
    assert seen[0].stall_timeout_s == launch.STALL_TIMEOUT_S == doctor.STALL_TIMEOUT_S


@pytest.mark.parametrize("value", ["0", "-5", "nan"])
def test_doctor_refuses_a_stall_timeout_that_is_not_positive(value, tmp_path, monkeypatch):
    result, seen = _doctor(["--stall-timeout", value], tmp_path, monkeypatch)
    assert result.exit_code == 2, result.output
    assert "--stall-timeout must be a positive number of seconds" in " ".join(result.output.split())
    assert seen == []


@pytest.mark.parametrize("knobs", ["num_workers=4", "compile"])
def test_the_proof_runs_get_the_stall_timeout_too(knobs, tmp_path, monkeypatch):
    """The runs that prove the fix are supervised like the baseline; compile, which recompiles in
    its first steps, gets at least run --try's longer limit, as in run --try."""
    import gpudoctor.cli.try_runs as try_runs
    from gpudoctor.collectors.knobs import SLOW_WARMUP_STALL_S

    specs = []

    def measure(make_spec, base, parsed, **_):
        specs.append(make_spec(base / "t", knobs=parsed, repeat=False))

    monkeypatch.setattr(try_runs, "measure", measure)
    progress = types.SimpleNamespace(say=lambda *_: None)
    doctor._prove(("python", "x.py"), tmp_path, 100, True, knobs, None, progress, 300.0)
    expected = max(300.0, SLOW_WARMUP_STALL_S) if knobs == "compile" else 300.0
    assert specs[0].stall_timeout_s == expected
