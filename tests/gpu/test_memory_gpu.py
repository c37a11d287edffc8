"""On a real GPU: the OOM dump names the line that held the memory; the estimate matches a run."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

GIB = 1 << 30


def _hold_two_gib():
    return torch.empty(2 * GIB, dtype=torch.uint8, device="cuda")  # the planted holder


def test_planted_oom_is_dumped_with_its_site(tmp_path) -> None:
    from gpudoctor.analysis.oom import explain_oom, top_sites
    from gpudoctor.core.memory_history import attach_oom_dump, start_history, stop_history
    from gpudoctor.records.base import read_json
    from gpudoctor.records.memory import OomSnapshot

    assert start_history()
    assert attach_oom_dump(tmp_path)
    held = _hold_two_gib()
    total = torch.cuda.get_device_properties(0).total_memory
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(total + GIB, dtype=torch.uint8, device="cuda")
    stop_history()
    snap = read_json(tmp_path / "oom.json", OomSnapshot, kind="oom_snapshot")
    assert snap.requested_bytes >= total and (tmp_path / "oom-snapshot.pickle").is_file()
    top = top_sites(snap)[0]
    assert "test_memory_gpu.py" in top.site and "_hold_two_gib" in top.site
    assert top.bytes >= 2 * GIB
    assert explain_oom(snap)[0].code == "GD-OOM-SHORTAGE"
    del held


def test_estimate_matches_a_real_run_within_15_percent() -> None:
    from torch import nn

    from gpudoctor.memory.estimate import EstimateConfig, estimate_memory, measure_point
    from gpudoctor.memory.inputs import batch_factory

    def model():
        return nn.Sequential(
            nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
            nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10),
        )

    make = batch_factory("image:3x64x64:10")
    est = estimate_memory(model, make, EstimateConfig(batch_size=256, device="cuda"))
    assert est.method == "measured-peaks"
    config = EstimateConfig(batch_size=256, device="cuda")
    measured = measure_point(model, make, 256, config, torch.device("cuda")).peak_allocated_bytes
    assert abs(est.peak_bytes - measured) / measured < 0.15, (est.peak_bytes, measured)
