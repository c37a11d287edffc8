"""Plain data shared by every part of gpudoctor. Standard library only."""

from gpudoctor.records.base import (
    SCHEMA_VERSION,
    JsonlWriter,
    SchemaError,
    from_dict,
    read_json,
    read_jsonl,
    record,
    to_dict,
    write_json,
)
from gpudoctor.records.env import CheckReport, CheckResult, Layer, Verdict
from gpudoctor.records.finding import Finding, Severity, rank_findings
from gpudoctor.records.gpu import GpuProcess, GpuSample, HostSample, MigDevice

__all__ = [
    "SCHEMA_VERSION",
    "CheckReport",
    "CheckResult",
    "Finding",
    "GpuProcess",
    "GpuSample",
    "HostSample",
    "JsonlWriter",
    "Layer",
    "MigDevice",
    "SchemaError",
    "Severity",
    "Verdict",
    "from_dict",
    "rank_findings",
    "read_json",
    "read_jsonl",
    "record",
    "to_dict",
    "write_json",
]
