"""The 10 MB logs of ``benchmarks/explain_speed.py`` get their right answers (its speed bar, a
10 MB log in under 2 s, is measured by that script, not timed here: a shared test machine's load
would decide a timed test, not the code)."""

from __future__ import annotations

import sys
from pathlib import Path

from gpudoctor.explain import explain_text

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

import explain_speed  # noqa: E402

TEN_MB = explain_speed.TEN_MB


def test_the_ten_megabyte_ddp_log_finds_the_oom_on_rank_three() -> None:
    text = explain_speed.ddp_log()
    assert len(text) >= TEN_MB
    report = explain_text(text)
    assert [m.entry_id for m in report.matches] == ["oom-fragmentation", "nccl-watchdog-timeout"]
    assert report.launcher is not None and report.launcher.rank == 3


def test_a_log_full_of_a_length_changing_lower_case_still_finds_the_oom() -> None:
    text = explain_speed.dotted_i_log()
    assert len(text) >= TEN_MB
    report = explain_text(text)
    assert report.matches and report.matches[0].entry_id.startswith("oom")
