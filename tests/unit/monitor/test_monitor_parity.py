"""What nvidia-smi and nvitop users look for, with the fake NVML: fan, P-state, encoder/decoder,
NVLink counters, MIG devices, per-process SM % and host memory, selecting GPUs by UUID or bus
id, whole MiB in the CSV. Unsupported readings are n/a with the reason, never a crash."""

from __future__ import annotations

import csv
import io
import json
import os
from types import SimpleNamespace

import pytest
from rich.console import Console
from typer.testing import CliRunner

import gpudoctor.collectors.nvml as nvml_mod
from gpudoctor.analysis.monitor_live import counter_rate
from gpudoctor.cli.app import app
from gpudoctor.collectors.nvml import GpuSampler, resolve_gpus
from gpudoctor.collectors.nvml_extras import normalise_bus_id
from gpudoctor.collectors.sample_log import GPU_COLUMNS, SampleLog, _mib, read_gpu_log
from gpudoctor.records.gpu import GpuSample
from gpudoctor.records.units import MIB, MISSING
from gpudoctor.report.monitor_view import render_monitor

from .conftest import mig_device


def _text(renderable) -> str:
    console = Console(file=io.StringIO(), width=100, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def test_full_device_gives_every_parity_reading(fake_nvml, fake_clock, stable_commands):
    s = GpuSampler(nvml=fake_nvml, clock=fake_clock)
    h200 = s.sample_once()[0]
    assert h200.uuid == "GPU-5e2b9d1a-0000-4000-8000-000000000000"
    assert h200.pci_bus_id == "00000000:18:00.0"  # bytes from old pynvml decoded
    assert (h200.fan_speed_pct, h200.pstate) == (30.0, 0)
    assert (h200.encoder_util_pct, h200.decoder_util_pct) == (0.0, 0.0)
    # 18 links; the fake's counters after one sample: rx 2000 KiB a link, tx 1000*(link+1) KiB
    assert h200.nvlink_rx_bytes == 18 * 2000 * 1024
    assert h200.nvlink_tx_bytes == 1000 * sum(range(1, 19)) * 1024
    assert h200.mig_devices == ()
    assert [(p.pid, p.sm_util_pct) for p in h200.processes] == [(4242, 87.0), (999_999_999, None)]
    assert h200.unavailable is None


def test_unsupported_parity_readings_are_n_a_with_a_reason(fake_nvml, fake_clock):
    s = GpuSampler(nvml=fake_nvml, clock=fake_clock)
    t4 = s.sample_once()[1]
    assert (t4.fan_speed_pct, t4.pstate) == (None, 8)
    assert (t4.encoder_util_pct, t4.decoder_util_pct) == (12.0, 3.0)
    assert t4.nvlink_rx_bytes is None and t4.unavailable["nvlink"] == "no NVLink on this GPU"
    assert t4.fan_speed_pct is None and "fan" in t4.unavailable
    text = _text(render_monitor([t4]))
    row = next(line for line in text.splitlines() if line.startswith("1 Tesla T4"))
    assert f" {MISSING} " in row and " P8 " in row
    assert "video encoder/decoder: GPU 1 12%/3%" in text
    assert "mig" not in text.split("n/a:")[-1]  # MIG unsupported is normal, not listed


def test_an_old_nvidia_ml_py_without_the_new_calls_does_not_crash(fake_nvml, fake_clock):
    old_names = {n for n in dir(fake_nvml) if not n.startswith("_")} - {
        "nvmlDeviceGetFanSpeed", "nvmlDeviceGetPerformanceState", "nvmlDeviceGetEncoderUtilization",
        "nvmlDeviceGetDecoderUtilization", "nvmlDeviceGetFieldValues", "nvmlDeviceGetMigMode",
        "nvmlDeviceGetProcessUtilization", "nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo",
    }
    old = SimpleNamespace(**{n: getattr(fake_nvml, n) for n in old_names})
    s = GpuSampler(nvml=old, clock=fake_clock)
    for _ in range(3):
        h200 = s.sample_once()[0]
    assert h200.util_gpu_pct is not None and h200.uuid == "" and h200.pstate is None
    for metric in ("fan", "pstate", "encoder", "decoder", "nvlink", "mig"):
        assert h200.unavailable[metric] == "not in this nvidia-ml-py (upgrade it)", metric
    assert "process_sm" in h200.unavailable
    assert all(p.sm_util_pct is None for p in h200.processes)


def test_mig_instances_are_listed_with_their_memory(fake_nvml_factory, fake_clock):
    s = GpuSampler(nvml=fake_nvml_factory([mig_device()]), clock=fake_clock)
    a100 = s.sample_once()[0]
    assert [(m.uuid, m.gpu_instance_id, m.compute_instance_id, m.mem_used_bytes)
            for m in a100.mig_devices] == [("MIG-1111", 1, 0, 2 << 30), ("MIG-3333", 2, 0, 0)]
    text = _text(render_monitor([a100]))
    assert "GPU 0 MIG 1/0 MIG-1111: 2.0/10.0 GiB" in text
    assert "GPU 0 MIG 2/0 MIG-3333: 0.0/40.0 GiB" in text


def test_per_process_host_memory_is_read(fake_nvml, fake_clock):
    fake_nvml.devices[0].procs.append((os.getpid(), 1 << 30))
    s = GpuSampler(nvml=fake_nvml, clock=fake_clock)
    me = next(p for p in s.sample_once()[0].processes if p.pid == os.getpid())
    assert me.host_rss_bytes > 10 * MIB  # this pytest process
    gone = next(p for p in s.sample_once()[0].processes if p.pid == 999_999_999)
    assert gone.host_rss_bytes is None


def test_nvlink_rate_comes_from_the_counters(fake_nvml, fake_clock):
    s = GpuSampler(nvml=fake_nvml, clock=fake_clock, process_interval=0.0)
    history = [s.sample_once()[0] for _ in range(4)]  # counters read every sample, 0.1 s apart
    # the fake's rx grows by 18 links x 2000 KiB a sample; its clock moves 0.1 s a sample
    assert counter_rate(history, "nvlink_rx_bytes") == pytest.approx(18 * 2000 * 1024 / 0.1)
    assert "NVLink rx/tx B/s: GPU 0 369M/1.8G" in _text(render_monitor([history[-1]], {0: history}))


def test_counter_rate_edge_cases():
    def at(t, v):
        return GpuSample(timestamp_s=t, index=0, name="x", nvlink_rx_bytes=v)

    assert counter_rate([at(0, 5)], "nvlink_rx_bytes") is None
    assert counter_rate([at(0, 5), at(1, 5), at(2, 5)], "nvlink_rx_bytes") == 0.0
    assert counter_rate([at(0, 5), at(0.5, 5), at(1, 15), at(1.5, 15)], "nvlink_rx_bytes") == 10.0
    assert counter_rate([at(0, 50), at(1, 5)], "nvlink_rx_bytes") is None  # driver reloaded


@pytest.mark.parametrize("selector,index", [
    ("GPU-77aa0c3e-0000-4000-8000-000000000001", 1), ("gpu-77aa", 1), ("00000000:18:00.0", 0),
    ("0000:18:00.0", 0), ("af:00.0", 1), ("1", 1), (0, 0),
])
def test_gpus_are_selected_by_index_uuid_or_bus_id(selector, index):
    ids = {0: ("GPU-5e2b9d1a-0000-4000-8000-000000000000", "00000000:18:00.0"),
           1: ("GPU-77aa0c3e-0000-4000-8000-000000000001", "00000000:AF:00.0")}
    assert resolve_gpus([selector], 2, ids) == [index]


def test_bus_ids_normalise_like_nvidia_smi():
    assert normalise_bus_id("07:00.0") == "00000000:07:00.0"
    assert normalise_bus_id("0000:AF:00.0") == "00000000:af:00.0"


def test_cli_selects_a_gpu_by_uuid_and_by_bus_id(monkeypatch, fake_nvml, stable_commands):
    monkeypatch.setattr(nvml_mod, "default_nvml", lambda: fake_nvml)
    runner = CliRunner(env={"COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"})
    for selector in ("GPU-77aa0c3e", "AF:00.0"):
        result = runner.invoke(app, ["monitor", "--once", "--json", "--gpus", selector])
        assert result.exit_code == 0, result.output
        gpus = json.loads(result.stdout)["gpus"]
        assert [(g["index"], g["name"]) for g in gpus] == [(1, "Tesla T4")]


def test_csv_writes_whole_mib_like_nvidia_smi_and_keeps_the_bytes(tmp_path, fake_nvml, fake_clock):
    s = GpuSampler(nvml=fake_nvml, clock=fake_clock)
    samples = [x for _ in range(2) for x in s.sample_once()]
    path = tmp_path / "gpu.csv"
    with SampleLog(path) as log:
        for x in samples:
            log.write_gpu(x)
    rows = list(csv.DictReader(path.open()))
    assert rows[0]["memory.used [MiB]"] == str(samples[0].mem_used_bytes // MIB) == "1465"
    assert rows[0]["memory.used [B]"] == str(samples[0].mem_used_bytes)
    assert (rows[0]["pstate"], rows[1]["pstate"]) == ("P0", "P8")
    assert rows[1]["fan.speed [%]"] == ""  # the T4 has no fan reading: an empty cell
    assert read_gpu_log(path) == samples


def test_a_log_written_before_the_parity_columns_still_reads(tmp_path, fake_nvml, fake_clock):
    s = GpuSampler(nvml=fake_nvml, clock=fake_clock)
    sample = s.sample_once()[0]
    old_columns = [(h, f, _mib if "[MiB]" in h else w, r) for h, f, w, r in GPU_COLUMNS]
    path = tmp_path / "old.csv"
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow([c[0] for c in old_columns])
        out.writerow([w(getattr(sample, f)) for _, f, w, _ in old_columns])
    back = read_gpu_log(path)[0]
    assert back.mem_used_bytes == sample.mem_used_bytes  # the old MiB fractions were exact
    assert back.uuid == "" and back.pstate is None and back.mig_devices == ()
    with SampleLog(path) as log:  # appending keeps the old file's columns
        log.write_gpu(sample)
    assert len({len(row) for row in csv.reader(path.open())}) == 1
    assert len(read_gpu_log(path)) == 2


def test_nvlink_counters_the_driver_refuses_are_n_a_with_the_reason(fake_nvml, fake_clock):
    real = fake_nvml.nvmlDeviceGetFieldValues

    def refusing(d, fields):  # the link count comes back, the data counters do not
        values = real(d, fields)
        for (field, _), v in zip(fields, values):
            if field != 91:
                v.nvmlReturn = 3  # NVML_ERROR_NOT_SUPPORTED
        return values

    fake_nvml.nvmlDeviceGetFieldValues = refusing
    s = GpuSampler(nvml=fake_nvml, clock=fake_clock)
    h200 = s.sample_once()[0]
    assert h200.nvlink_rx_bytes is None
    assert h200.unavailable["nvlink"] == "the driver does not give NVLink data counters"


def test_an_older_driver_without_the_all_links_sum_is_asked_per_link(fake_nvml, fake_clock):
    fake_nvml.devices[0].nvlink_sum = False
    s = GpuSampler(nvml=fake_nvml, clock=fake_clock)
    h200 = s.sample_once()[0]
    assert h200.nvlink_rx_bytes == 18 * 2000 * 1024
    assert h200.nvlink_tx_bytes == 1000 * sum(range(1, 19)) * 1024
    assert h200.unavailable is None
