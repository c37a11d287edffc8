"""Public training scripts recorded on an H200, whose verdicts were checked by experiment.

pytorch/examples @77f55b91 run unmodified under `gpudoctor run --steps 60` (benchmarks/corpus), then
the prescribed fix applied by hand to a copy and measured A B A B (benchmarks/results/corpus): for
each of these five the data-loader fix was the confirmed one (+23% to +224% throughput). Today's
analysis must still name it first, and not bury it under findings that do not hold there
(DataParallel over one GPU, a warm-up read as a slow-down, syncs that only wait for data).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.analysis.diagnose import diagnose
from gpudoctor.records.finding import Severity
from gpudoctor.records.rundir import load_run

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "runs_corpus"
# script -> measured throughput gain of the hand-applied loader fix (corpus-ab-1/2.md)
CONFIRMED = {"imagenet_resnet50": "+23%", "imagenet_resnet18": "+224%", "mnist": "+112%",
             "super_resolution": "+30%", "vae": "+110%"}


@pytest.mark.parametrize("name", sorted(CONFIRMED))
def test_the_measured_fix_is_the_verdict(name: str) -> None:
    findings = diagnose(load_run(CORPUS / name))
    serious = [f for f in findings if f.severity is not Severity.INFO]
    assert serious[0].code == "GD-RUN-DATALOADER", [f.code for f in serious]
    assert not {"GD-RUN-SLOWDOWN", "GD-RUN-DATA-PARALLEL"} & {f.code for f in serious}
