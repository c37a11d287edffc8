"""CSV and JSONL sample logs: column order, exact round trips, crash-cut lines, bad names."""

from __future__ import annotations

import csv

import pytest

from gpudoctor.collectors.nvml import GpuSampler
from gpudoctor.collectors.sample_log import (
    SampleLog,
    host_log_path,
    log_format,
    read_gpu_log,
    read_host_log,
)
from gpudoctor.records.base import SchemaError
from gpudoctor.records.gpu import HostSample

NVIDIA_SMI_COLUMNS = [
    "timestamp", "name", "utilization.gpu [%]", "utilization.memory [%]", "memory.total [MiB]",
    "memory.used [MiB]", "memory.free [MiB]", "temperature.gpu", "power.draw [W]",
]


def _gpu_samples(fake_nvml, fake_clock, n=4):
    s = GpuSampler(nvml=fake_nvml, clock=fake_clock)
    for _ in range(n):
        s.sample_once()
    return s.samples()


HOST = [
    HostSample(timestamp_s=1_795_000_000.05, cpu_pct=12.5, busiest_core_pct=100.0,
               ram_used_bytes=12_884_901_888 + 7, ram_total_bytes=540_000_000_000,
               tree_cpu_pct=99.5, tree_rss_bytes=3_000_000_001, tree_pids=(10, 11, 12)),
    HostSample(timestamp_s=1_795_000_000.55),
]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_round_trip_is_exact(tmp_path, suffix, fake_nvml, fake_clock, stable_commands):
    samples = _gpu_samples(fake_nvml, fake_clock)
    path = tmp_path / f"log{suffix}"
    with SampleLog(path) as log:
        for s in samples:
            log.write_gpu(s)
        for h in HOST:
            log.write_host(h)
    assert (log.gpu_rows, log.host_rows) == (8, 2)
    assert read_gpu_log(path) == samples
    assert read_host_log(host_log_path(path)) == HOST


def test_csv_starts_with_the_nvidia_smi_columns(tmp_path, fake_nvml, fake_clock):
    path = tmp_path / "gpu.csv"
    with SampleLog(path) as log:
        for s in _gpu_samples(fake_nvml, fake_clock, n=1):
            log.write_gpu(s)
    rows = list(csv.reader(path.open()))
    assert rows[0][:9] == NVIDIA_SMI_COLUMNS
    assert rows[1][:9] == [
        "2026/11/18 11:06:40.000", "NVIDIA H200", "53", "27", "143771", "1465", "142305", "41",
        "145.5",
    ]
    assert rows[2][8] == ""  # the T4 cannot give power: an empty cell, not 0


def test_appending_to_an_existing_log_keeps_one_header(tmp_path, fake_nvml, fake_clock):
    path = tmp_path / "gpu.csv"
    samples = _gpu_samples(fake_nvml, fake_clock, n=2)
    for half in (samples[:2], samples[2:]):
        with SampleLog(path) as log:
            for s in half:
                log.write_gpu(s)
    assert read_gpu_log(path) == samples


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_line_cut_by_ctrl_c_is_skipped(tmp_path, suffix, fake_nvml, fake_clock):
    samples = _gpu_samples(fake_nvml, fake_clock, n=2)
    path = tmp_path / f"log{suffix}"
    with SampleLog(path) as log:
        for s in samples:
            log.write_gpu(s)
    text = path.read_text()
    path.write_text(text[: len(text) - 40])  # the last line cut short
    assert read_gpu_log(path) == samples[:-1]


def test_a_bad_middle_line_names_its_line(tmp_path, fake_nvml, fake_clock):
    path = tmp_path / "log.csv"
    with SampleLog(path) as log:
        for s in _gpu_samples(fake_nvml, fake_clock, n=2):
            log.write_gpu(s)
    rows = list(csv.reader(path.open()))
    rows[2][2] = "fifty"  # utilization.gpu of the second data row
    with path.open("w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    with pytest.raises(SchemaError, match=r"log.csv:3: bad row"):
        read_gpu_log(path)


def test_not_a_sample_log(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(SchemaError, match="missing columns"):
        read_gpu_log(path)


def test_format_follows_the_suffix_and_says_which_work():
    assert log_format("x.CSV") == "csv"
    assert log_format("x.ndjson") == "jsonl"
    with pytest.raises(ValueError, match=r"name it \*\.csv .* or \*\.jsonl"):
        log_format("x.txt")
    assert host_log_path("runs/a.jsonl").as_posix() == "runs/a.host.jsonl"


@pytest.mark.parametrize("name, foreign", [
    ("u.host.csv", "a,b\n1,2\n"),
    ("u.csv", "a,b\n1,2\n"),
    ("u.host.jsonl", '{"a": 1}\n'),
    ("u.jsonl", '{"schema_version": 1, "kind": "host"}\n'),  # ours, but the other kind
])
def test_a_users_existing_file_is_refused_and_left_as_it_was(tmp_path, name, foreign):
    log = tmp_path / name.replace(".host", "")
    target = tmp_path / name
    target.write_text(foreign)
    with pytest.raises(ValueError, match="not a gpudoctor .* log.*new file name"):
        SampleLog(log)
    assert target.read_text() == foreign


def test_our_own_log_is_appended_to(tmp_path, fake_nvml, fake_clock):
    log = tmp_path / "g.csv"
    with SampleLog(log) as sink:
        for s in _gpu_samples(fake_nvml, fake_clock, 2):
            sink.write_gpu(s)
        sink.write_host(HOST[0])
    with SampleLog(log) as sink:  # no refusal: both files are ours
        sink.write_host(HOST[1])
    assert len(list(read_host_log(host_log_path(log)))) == 2
