"""Records round-trip through JSON and JSONL, and bad files fail with clear messages."""

from __future__ import annotations

import json
import math

import pytest

from gpudoctor.records import (
    CheckReport,
    CheckResult,
    Finding,
    GpuProcess,
    GpuSample,
    JsonlWriter,
    Layer,
    SchemaError,
    Severity,
    Verdict,
    from_dict,
    rank_findings,
    read_json,
    read_jsonl,
    to_dict,
    write_json,
)


def _sample(ts: float = 1.5) -> GpuSample:
    return GpuSample(
        timestamp_s=ts,
        index=0,
        name="NVIDIA H200",
        util_gpu_pct=97.0,
        mem_used_bytes=1 << 30,
        throttle_reasons=("sw_power_cap",),
        processes=(GpuProcess(pid=42, used_memory_bytes=1 << 29, command="python train.py"),),
        unavailable={"ecc_errors_uncorrected": "not supported by this GPU"},
    )


def test_round_trip_nested_record() -> None:
    sample = _sample()
    assert from_dict(GpuSample, json.loads(json.dumps(to_dict(sample)))) == sample


def test_enums_and_nan_round_trip() -> None:
    report = CheckReport(
        results=(CheckResult(layer=Layer.DRIVER, name="driver.version", verdict=Verdict.FAIL, evidence="x"),),
        summary="1 failed",
        duration_ms=float("nan"),
    )
    back = from_dict(CheckReport, json.loads(json.dumps(to_dict(report))))
    assert back.results == report.results
    assert math.isnan(back.duration_ms)
    assert back.worst is Verdict.FAIL


def test_missing_field_names_record_and_field() -> None:
    with pytest.raises(SchemaError, match="GpuSample: required field 'index'"):
        from_dict(GpuSample, {"timestamp_s": 1.0, "name": "x"})


def test_wrong_type_is_rejected() -> None:
    with pytest.raises(SchemaError, match="GpuSample.index"):
        from_dict(GpuSample, {"timestamp_s": 1.0, "index": "zero", "name": "x"})


def test_json_document_round_trip_and_newer_schema(tmp_path) -> None:
    path = tmp_path / "x.json"
    write_json(path, _sample(), kind="gpu_sample")
    assert read_json(path, GpuSample, kind="gpu_sample") == _sample()
    payload = json.loads(path.read_text())
    payload["schema_version"] = 99
    path.write_text(json.dumps(payload))
    with pytest.raises(SchemaError, match="newer than this gpudoctor"):
        read_json(path, GpuSample, kind="gpu_sample")


def test_jsonl_survives_a_truncated_last_line(tmp_path) -> None:
    path = tmp_path / "gpu.jsonl"
    with JsonlWriter(path, kind="gpu") as writer:
        writer.write(_sample(1.0))
        writer.write(_sample(2.0))
    with path.open("a") as fh:
        fh.write('{"timestamp_s": 3.0, "ind')  # cut off by a crash
    assert [s.timestamp_s for s in read_jsonl(path, GpuSample, kind="gpu")] == [1.0, 2.0]


def test_jsonl_wrong_kind(tmp_path) -> None:
    path = tmp_path / "gpu.jsonl"
    JsonlWriter(path, kind="gpu").close()
    with pytest.raises(SchemaError, match="expected 'steps'"):
        list(read_jsonl(path, GpuSample, kind="steps"))


def test_rank_findings_by_gain_then_severity() -> None:
    a = Finding(code="A", severity=Severity.INFO, title="a", expected_gain=0.1)
    b = Finding(code="B", severity=Severity.ERROR, title="b", expected_gain=0.4)
    c = Finding(code="C", severity=Severity.ERROR, title="c")
    d = Finding(code="D", severity=Severity.WARN, title="d")
    assert [f.code for f in rank_findings([a, b, c, d])] == ["B", "A", "C", "D"]
