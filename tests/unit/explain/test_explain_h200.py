"""Failures produced for real on an H200 (torch 2.11, CUDA 13) by tools/gpu/jobs/60_explain_real_errors.sh.

The job writes ``logs/<case>.log`` and ``expected.json``; once committed under
``tests/fixtures/explain/h200/`` every log must rank its expected entry first among the roots.
"""

from __future__ import annotations

import json

import pytest

from gpudoctor.explain import explain_text

from .conftest import EXPLAIN_FIXTURES

H200 = EXPLAIN_FIXTURES / "h200"
EXPECTED = json.loads((H200 / "expected.json").read_text()) if (H200 / "expected.json").exists() else {}
CASES = sorted(c for c in EXPECTED if (H200 / "logs" / f"{c}.log").exists())


@pytest.mark.skipif(not CASES, reason="no H200 logs committed yet (run tools/gpu/jobs/60_explain_real_errors.sh)")
@pytest.mark.parametrize("case", CASES or ["none"])
def test_real_h200_failure_is_explained(case: str) -> None:
    report = explain_text((H200 / "logs" / f"{case}.log").read_text(encoding="utf-8", errors="replace"))
    roots = [m.entry_id for m in report.matches if m.role == "root"] or [
        m.entry_id for m in report.matches]
    assert roots and roots[0] == EXPECTED[case], [m.entry_id for m in report.matches]
