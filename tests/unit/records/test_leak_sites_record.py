"""``leak-sites-rank{N}.json``: the steps ``run`` recorded allocation history in
(``LeakSites.history_steps``) round-trip, and a file written before the field existed loads."""

from __future__ import annotations

import json
from pathlib import Path

from gpudoctor.records.base import SCHEMA_VERSION, write_json
from gpudoctor.records.memory import LeakSites, SiteGrowth
from gpudoctor.records.run import RunManifest
from gpudoctor.records.rundir import KIND_LEAK_SITES, KIND_MANIFEST, MANIFEST, leak_sites_file, load_run


def _run_dir(tmp_path: Path) -> Path:
    write_json(tmp_path / MANIFEST, RunManifest(command=("python", "train.py"), started_at=1.0), kind=KIND_MANIFEST)
    return tmp_path


def test_history_steps_round_trip(tmp_path: Path) -> None:
    sites = LeakSites(step_from=9, step_to=13, history_steps=(9, 13),
                      sites=(SiteGrowth(site="train.py:9 f", bytes_from=1, bytes_to=5, blocks_from=1, blocks_to=5),))
    write_json(_run_dir(tmp_path) / leak_sites_file(0), sites, kind=KIND_LEAK_SITES)
    assert load_run(tmp_path).leak_sites[0] == sites


def test_a_leak_sites_file_without_history_steps_still_loads(tmp_path: Path) -> None:
    """As gpudoctor wrote it before the field (and as memory mode, history on all run, means it):
    no steps to leave out."""
    old = {"schema_version": SCHEMA_VERSION, "kind": KIND_LEAK_SITES,
           "data": {"step_from": 9, "step_to": 13, "sites": [
               {"site": "train.py:9 f", "bytes_from": 1048576, "bytes_to": 5242880,
                "blocks_from": 1, "blocks_to": 5}]}}
    (_run_dir(tmp_path) / leak_sites_file(0)).write_text(json.dumps(old), encoding="utf-8")
    sites = load_run(tmp_path).leak_sites[0]
    assert (sites.step_from, sites.step_to, sites.history_steps) == (9, 13, None)
    assert sites.sites[0].bytes_to == 5242880
