"""Sample logs: GPU and host samples as CSV or JSON Lines, written a line at a time.

The format follows the file's suffix: ``.csv`` or ``.jsonl`` (also ``.ndjson``). GPU samples go
to the file itself; host samples to a sibling ``<stem>.host<suffix>`` so each file holds one
kind of row.

CSV columns start with those of ``nvidia-smi --query-gpu=timestamp,name,utilization.gpu,
utilization.memory,memory.total,memory.used,memory.free,temperature.gpu,power.draw
--format=csv,nounits`` (memory in whole MiB as nvidia-smi writes it, power in W, the timestamp as
``YYYY/MM/DD HH:MM:SS.mmm`` in UTC), then the rest; the exact byte counts follow at the end
(``memory.used [B]``), so a CSV log reads back into the same records. Columns added since the
first release (:data:`GPU_COLUMNS_ADDED`) may be absent from an older log, which still reads:
memory then comes from the MiB columns (fractions of a MiB were written then). JSONL files are the
``gpu.jsonl``/``host.jsonl`` format of a run directory (``gpudoctor.records.rundir``).

Every line is flushed as it is written: Ctrl-C or a crash loses at most the line in flight.
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from gpudoctor.records.base import JsonlWriter, SchemaError, from_dict, read_jsonl, to_dict
from gpudoctor.records.gpu import GpuProcess, GpuSample, HostSample, MigDevice
from gpudoctor.records.rundir import KIND_GPU, KIND_HOST
from gpudoctor.records.units import MIB

CSV_SUFFIXES = (".csv",)
JSONL_SUFFIXES = (".jsonl", ".ndjson")


def _num(v: float | int | None) -> str:
    if v is None:
        return ""
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return str(int(v))
    return repr(v)


def _mib(v: int | None) -> str:
    # bytes / 2**20 is exact in binary floating point, so repr() round-trips it
    return "" if v is None else _num(v / MIB)


def _whole_mib(v: int | None) -> str:
    """Whole MiB, rounded down, as ``nvidia-smi --query-gpu=memory.used`` prints it."""
    return "" if v is None else str(v // MIB)


def _pstate_out(v: int | None) -> str:
    return "" if v is None else f"P{v}"


def _pstate_in(s: str) -> int | None:
    return None if s == "" else int(s.removeprefix("P"))


def _mig_out(devs: tuple[MigDevice, ...]) -> str:
    return json.dumps(to_dict(devs), separators=(",", ":")) if devs else ""


def _mig_in(s: str) -> tuple[MigDevice, ...]:
    return tuple(from_dict(MigDevice, d) for d in json.loads(s)) if s else ()


def _float(s: str) -> float | None:
    return None if s == "" else float(s)


def _int(s: str) -> int | None:
    return None if s == "" else int(s)


def _from_mib(s: str) -> int | None:
    return None if s == "" else int(round(float(s) * MIB))


def _timestamp(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, tz=_dt.timezone.utc).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]


def _procs_out(procs: tuple[GpuProcess, ...]) -> str:
    return json.dumps(to_dict(procs), separators=(",", ":")) if procs else ""


def _procs_in(s: str) -> tuple[GpuProcess, ...]:
    return tuple(from_dict(GpuProcess, p) for p in json.loads(s)) if s else ()


# (header, GpuSample field, write, read); the first nine are nvidia-smi's --query-gpu columns
GPU_COLUMNS: tuple[tuple[str, str, Callable[[Any], str], Callable[[str], Any]], ...] = (
    ("timestamp", "timestamp_s", _timestamp, lambda s: None),
    ("name", "name", str, str),
    ("utilization.gpu [%]", "util_gpu_pct", _num, _float),
    ("utilization.memory [%]", "util_mem_pct", _num, _float),
    ("memory.total [MiB]", "mem_total_bytes", _whole_mib, _from_mib),
    ("memory.used [MiB]", "mem_used_bytes", _whole_mib, _from_mib),
    ("memory.free [MiB]", "mem_free_bytes", _whole_mib, _from_mib),
    ("temperature.gpu", "temperature_c", _num, _float),
    ("power.draw [W]", "power_w", _num, _float),
    ("index", "index", str, int),
    ("timestamp_s", "timestamp_s", repr, float),
    ("power.limit [W]", "power_limit_w", _num, _float),
    ("clocks.sm [MHz]", "sm_clock_mhz", _num, _int),
    ("clocks.mem [MHz]", "mem_clock_mhz", _num, _int),
    ("pcie.rx [B/s]", "pcie_rx_bytes_per_s", _num, _float),
    ("pcie.tx [B/s]", "pcie_tx_bytes_per_s", _num, _float),
    ("clocks_event_reasons", "throttle_reasons", "|".join, lambda s: tuple(s.split("|")) if s else ()),
    ("ecc.errors.uncorrected.volatile.total", "ecc_errors_uncorrected", _num, _int),
    ("processes", "processes", _procs_out, _procs_in),
    ("unavailable", "unavailable", lambda d: json.dumps(d, sort_keys=True) if d else "",
     lambda s: json.loads(s) if s else None),
)

# added after the first release: an older log lacks them (the record's default is kept then);
# the byte columns come last so they win over the whole-MiB columns when both are there
GPU_COLUMNS_ADDED: tuple[tuple[str, str, Callable[[Any], str], Callable[[str], Any]], ...] = (
    ("uuid", "uuid", str, str),
    ("pci.bus_id", "pci_bus_id", str, str),
    ("fan.speed [%]", "fan_speed_pct", _num, _float),
    ("pstate", "pstate", _pstate_out, _pstate_in),
    ("utilization.encoder [%]", "encoder_util_pct", _num, _float),
    ("utilization.decoder [%]", "decoder_util_pct", _num, _float),
    ("nvlink.rx [B]", "nvlink_rx_bytes", _num, _int),
    ("nvlink.tx [B]", "nvlink_tx_bytes", _num, _int),
    ("mig.devices", "mig_devices", _mig_out, _mig_in),
    ("memory.total [B]", "mem_total_bytes", _num, _int),
    ("memory.used [B]", "mem_used_bytes", _num, _int),
    ("memory.free [B]", "mem_free_bytes", _num, _int),
)

HOST_COLUMNS: tuple[tuple[str, str, Callable[[Any], str], Callable[[str], Any]], ...] = (
    ("timestamp", "timestamp_s", _timestamp, lambda s: None),
    ("cpu [%]", "cpu_pct", _num, _float),
    ("cpu.busiest_core [%]", "busiest_core_pct", _num, _float),
    ("ram.used [MiB]", "ram_used_bytes", _mib, _from_mib),
    ("ram.total [MiB]", "ram_total_bytes", _mib, _from_mib),
    ("timestamp_s", "timestamp_s", repr, float),
    ("tree.cpu [%]", "tree_cpu_pct", _num, _float),
    ("tree.rss [MiB]", "tree_rss_bytes", _mib, _from_mib),
    ("tree.pids", "tree_pids", lambda t: " ".join(map(str, t)), lambda s: tuple(map(int, s.split()))),
)


def log_format(path: Path) -> str:
    """"csv" or "jsonl" from the suffix; ``ValueError`` saying which suffixes work otherwise."""
    suffix = Path(path).suffix.lower()
    if suffix in CSV_SUFFIXES:
        return "csv"
    if suffix in JSONL_SUFFIXES:
        return "jsonl"
    raise ValueError(
        f"cannot tell the log format of {path}: name it *.csv (nvidia-smi-like columns) "
        "or *.jsonl (one JSON record a line)"
    )


def host_log_path(path: Path) -> Path:
    """Where host samples go next to a GPU log: ``run.csv`` -> ``run.host.csv``."""
    path = Path(path)
    return path.with_name(f"{path.stem}.host{path.suffix}")


def refuse_foreign(path: Path, columns: tuple, kind: str) -> None:
    """Raise ``ValueError`` when ``path`` exists, is not empty and is not a gpudoctor log of
    this kind: appending would write our rows under someone else's header."""
    if not path.exists() or path.stat().st_size == 0:
        return
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            first = fh.readline()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: exists and cannot be read as a gpudoctor sample log ({exc}); "
                         "give --log a new file name") from None
    if log_format(path) == "csv":
        header = next(csv.reader([first]), [])
        ours = {c[0] for c in columns}
        fits = bool(header) and header[0] == columns[0][0] and all(h in ours for h in header)
    else:
        try:
            head = json.loads(first)
        except ValueError:
            head = None
        fits = isinstance(head, dict) and head.get("kind") == kind and "schema_version" in head
    if not fits:
        raise ValueError(f"{path}: exists and is not a gpudoctor sample log of this kind, so "
                         "it is left as it is; give --log a new file name (or move that file away)")


class _CsvWriter:
    def __init__(self, path: Path, columns: tuple) -> None:
        self._columns = columns
        new = not path.exists() or path.stat().st_size == 0
        if not new:  # appending: keep the file's own columns (an older log has fewer)
            with path.open(encoding="utf-8", newline="") as fh:
                header = next(csv.reader(fh), [])
            by_head = {c[0]: c for c in columns}
            self._columns = tuple(by_head[h] for h in header)  # refuse_foreign checked them
        self._file: TextIO = path.open("a", encoding="utf-8", newline="")
        self._csv = csv.writer(self._file)
        if new:
            self._csv.writerow([c[0] for c in columns])
            self._file.flush()

    def write(self, obj: Any) -> None:
        self._csv.writerow([write(getattr(obj, field)) for _, field, write, _ in self._columns])
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class SampleLog:
    """Append GPU and host samples to a log (CSV or JSONL by suffix), thread-safe, per line.

    ``write_gpu`` and ``write_host`` fit ``GpuSampler(on_sample=...)`` and
    ``HostSampler(on_sample=...)``. The host file is created on the first host sample.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.format = log_format(self.path)
        self.host_path = host_log_path(self.path)
        self.gpu_rows = 0
        self.host_rows = 0
        self._lock = threading.Lock()
        refuse_foreign(self.path, GPU_COLUMNS + GPU_COLUMNS_ADDED, KIND_GPU)
        refuse_foreign(self.host_path, HOST_COLUMNS, KIND_HOST)
        self._gpu = self._open(self.path, GPU_COLUMNS, KIND_GPU)
        self._host: Any = None

    def _open(self, path: Path, columns: tuple, kind: str) -> Any:
        if columns is GPU_COLUMNS:
            columns = GPU_COLUMNS + GPU_COLUMNS_ADDED
        if self.format == "csv":
            return _CsvWriter(path, columns)
        return JsonlWriter(path, kind=kind)

    def write_gpu(self, sample: GpuSample) -> None:
        with self._lock:
            self._gpu.write(sample)
            self.gpu_rows += 1

    def write_host(self, sample: HostSample) -> None:
        with self._lock:
            if self._host is None:
                self._host = self._open(self.host_path, HOST_COLUMNS, KIND_HOST)
            self._host.write(sample)
            self.host_rows += 1

    def close(self) -> None:
        with self._lock:
            self._gpu.close()
            if self._host is not None:
                self._host.close()

    def __enter__(self) -> SampleLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_csv(path: Path, cls: type, columns: tuple, added: tuple = ()) -> Iterator[Any]:
    with path.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        return
    want = [c[0] for c in columns]
    header = rows[0]
    missing = [h for h in want if h not in header]
    if missing:
        raise SchemaError(f"{path}: not a gpudoctor sample log (missing columns {missing})")
    columns = columns + tuple(c for c in added if c[0] in header)
    pos = {c[0]: header.index(c[0]) for c in columns}
    last = len(rows) - 1
    for number, row in enumerate(rows[1:], start=1):
        if not row:
            continue
        try:
            values = {}
            for head, field, _, read in columns:
                if head == "timestamp":  # the readable copy; timestamp_s holds the exact value
                    continue
                values[field] = read(row[pos[head]])
            yield cls(**values)
        except (IndexError, ValueError, json.JSONDecodeError, SchemaError) as exc:
            if number == last:
                return  # a line cut off by a crash or Ctrl-C
            raise SchemaError(f"{path}:{number + 1}: bad row ({exc})") from None


def read_gpu_log(path: Path) -> list[GpuSample]:
    """Read GPU samples back from a ``.csv`` or ``.jsonl`` log."""
    path = Path(path)
    if log_format(path) == "csv":
        return list(_read_csv(path, GpuSample, GPU_COLUMNS, GPU_COLUMNS_ADDED))
    return list(read_jsonl(path, GpuSample, kind=KIND_GPU))


def read_host_log(path: Path) -> list[HostSample]:
    """Read host samples back from a ``.host.csv`` or ``.host.jsonl`` log."""
    path = Path(path)
    if log_format(path) == "csv":
        return list(_read_csv(path, HostSample, HOST_COLUMNS))
    return list(read_jsonl(path, HostSample, kind=KIND_HOST))
