"""``gpudoctor check --junit FILE``: JUnit XML for CI, built with lint's JUnit writer."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from typer.testing import CliRunner

from gpudoctor.cli.app import app
from gpudoctor.records.base import to_dict

runner = CliRunner()


def _facts(tmp_path: Path, facts) -> Path:
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(to_dict(facts)))
    return path


def _cases(path: Path) -> tuple[ET.Element, dict[str, ET.Element]]:
    root = ET.fromstring(path.read_text(encoding="utf-8"))
    suite = root.find("testsuite")
    return suite, {c.get("name"): c for c in suite.iter("testcase")}


def test_a_cpu_only_machine_fails_the_driver_case_and_skips_the_layers_above(tmp_path, facts_factory):
    out = tmp_path / "check.xml"
    result = runner.invoke(app, ["check", "--facts", str(_facts(tmp_path, facts_factory.cpu_only())),
                                 "--junit", str(out)])
    assert result.exit_code == 1
    json_rows = json.loads(runner.invoke(app, ["check", "--json", "--facts", str(tmp_path / "facts.json")]).stdout)
    suite, cases = _cases(out)
    assert set(cases) == {r["name"] for r in json_rows["results"]}  # one case per row
    driver = cases["driver.loaded"]
    assert driver.get("classname") == "gpudoctor.check.driver"
    assert driver.find("failure").get("type") == "FAIL"
    failed = {r["name"] for r in json_rows["results"] if r["verdict"] in ("fail", "warn")}
    assert {n for n, c in cases.items() if c.find("failure") is not None} == failed
    skipped = {r["name"] for r in json_rows["results"] if r["verdict"] == "skip"}
    assert {n for n, c in cases.items() if c.find("skipped") is not None} == skipped
    assert int(suite.get("failures")) == len(failed) and int(suite.get("tests")) == len(cases)
    # --fail-on error: WARN rows pass; --fail-on never: nothing fails
    runner.invoke(app, ["check", "--facts", str(tmp_path / "facts.json"), "--junit", str(out), "--fail-on", "never"])
    suite, cases = _cases(out)  # an earlier report of ours is replaced
    assert suite.get("failures") == "0" and not any(c.find("failure") is not None for c in cases.values())


def test_a_healthy_machine_passes_every_case(tmp_path, facts_factory):
    out = tmp_path / "check.xml"
    result = runner.invoke(app, ["check", "--facts", str(_facts(tmp_path, facts_factory.healthy(2))), "--junit", str(out)])
    assert result.exit_code == 0
    suite, cases = _cases(out)
    assert suite.get("failures") == "0" and "nccl.allreduce" in cases


def test_junit_never_overwrites_someone_elses_file(tmp_path, facts_factory):
    theirs = tmp_path / "results.xml"
    theirs.write_text("<testsuites name='pytest'/>")
    result = runner.invoke(app, ["check", "--facts", str(_facts(tmp_path, facts_factory.healthy(1))),
                                 "--junit", str(theirs)])
    assert result.exit_code == 2 and "not a gpudoctor check report" in result.output
    assert theirs.read_text() == "<testsuites name='pytest'/>"
