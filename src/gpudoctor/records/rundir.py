"""The on-disk layout of a run directory, and loading it back.

```
RUNDIR/
  manifest.json          RunManifest
  config-rank{N}.json    RankConfig, one per rank
  steps-rank{N}.jsonl    StepRecord lines, one per optimizer step (a later line for the same
                         step completes an earlier one: see read_steps)
  window-rank{N}.json    WindowSummary of the profiler window
  memory-rank{N}.jsonl   StageMemory lines (``gpudoctor memory run``: the first steps, by stage)
  modules-rank{N}.jsonl  ModuleMemory lines (``gpudoctor memory run --modules``: one step)
  leak-sites-rank{N}.json  LeakSites: allocation sites whose live bytes grew (memory mode, or
                         ``run`` once a leak shows)
  bench.json             `gpudoctor bench copy --json` saved here by the user (optional): its
                         pinned host-to-device figure is the copy ceiling the PCIe rule uses
  oom.json               OomSnapshot at an out-of-memory error (memory mode; oom-rank{N}.json
                         per rank under torchrun), with
  oom-snapshot.pickle    the full allocator snapshot for PyTorch's memory viewer
  gpu.jsonl              GpuSample lines from the NVML sampler (parent process)
  host.jsonl             HostSample lines
  env.json               CheckReport of the environment (when checked)
  findings.json          the diagnosis (list of Finding) and the analysis version that made it
  stdout.log             the child's combined output
  stacks-rank{N}.txt     every thread's Python stack of rank N (faulthandler) when the run
                         stalled, was interrupted or died of a fatal signal; stacks-pid{P}.txt
                         for a probed process without a rank (torchrun's launcher)
  compile-pid{P}.jsonl   the start and end of each compilation (torch.compile) of probed
                         process P, as it happened (the supervisor leaves compile time out of
                         its stall limits; the steps carry compile_ms)
  report.html            the HTML report (gpudoctor report)
```
Every JSON file carries ``schema_version``; see :mod:`gpudoctor.records.base`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from gpudoctor.records.base import SchemaError, read_json, read_jsonl, record
from gpudoctor.records.env import CheckReport
from gpudoctor.records.finding import Finding
from gpudoctor.records.gpu import GpuSample, HostSample
from gpudoctor.records.memory import LeakSites, ModuleMemory, OomSnapshot, StageMemory
from gpudoctor.records.run import RankConfig, RunManifest, WindowSummary
from gpudoctor.records.step import StepRecord

MANIFEST = "manifest.json"
GPU_SAMPLES = "gpu.jsonl"
HOST_SAMPLES = "host.jsonl"
ENV = "env.json"
FINDINGS = "findings.json"
STDOUT = "stdout.log"
REPORT = "report.html"
BENCH = "bench.json"
OOM = "oom.json"
OOM_PICKLE = "oom-snapshot.pickle"
_OOM_FILE = re.compile(r"oom(?:-rank(\d+))?\.json")

KIND_MANIFEST = "run_manifest"
KIND_CONFIG = "rank_config"
KIND_STEPS = "steps"
KIND_WINDOW = "window_summary"
KIND_GPU = "gpu_samples"
KIND_HOST = "host_samples"
KIND_ENV = "check_report"
KIND_FINDINGS = "findings"
KIND_MEMORY = "memory_stages"
KIND_OOM = "oom_snapshot"
KIND_MODULES = "module_memory"
KIND_LEAK_SITES = "leak_sites"


def steps_file(rank: int) -> str:
    return f"steps-rank{rank}.jsonl"


def config_file(rank: int) -> str:
    return f"config-rank{rank}.json"


def window_file(rank: int) -> str:
    return f"window-rank{rank}.json"


def memory_file(rank: int) -> str:
    return f"memory-rank{rank}.jsonl"


def modules_file(rank: int) -> str:
    return f"modules-rank{rank}.jsonl"


def leak_sites_file(rank: int) -> str:
    return f"leak-sites-rank{rank}.json"


@record
class FindingList:
    """``findings.json``: the findings and the version of the analysis that made them.

    ``analysis_version`` is ``gpudoctor.cli.diagnose.analysis_version()`` at the time ("" in files
    written before it existed): a reader recomputes findings whose version is not today's.
    """

    findings: tuple[Finding, ...]
    analysis_version: str = ""


@dataclass
class RunData:
    """Everything in a run directory, loaded. Missing optional files are empty/None."""

    path: Path
    manifest: RunManifest
    configs: dict[int, RankConfig] = field(default_factory=dict)
    steps: dict[int, list[StepRecord]] = field(default_factory=dict)
    windows: dict[int, WindowSummary] = field(default_factory=dict)
    gpu: list[GpuSample] = field(default_factory=list)
    host: list[HostSample] = field(default_factory=list)
    env: CheckReport | None = None
    findings: tuple[Finding, ...] | None = None
    findings_version: str = ""  # FindingList.analysis_version of findings.json
    memory: dict[int, list[StageMemory]] = field(default_factory=dict)  # memory mode only
    oom: OomSnapshot | None = None  # memory mode, when the script ran out of memory
    modules: dict[int, list[ModuleMemory]] = field(default_factory=dict)  # memory run --modules
    leak_sites: dict[int, LeakSites] = field(default_factory=dict)  # memory mode, or run on a leak
    copy_ceiling_gbs: float | None = None  # pinned H2D GB/s from bench.json, when the user saved one
    stacks: dict[int, str] = field(default_factory=dict)  # rank -> faulthandler text (stacks-rank{N}.txt)

    @property
    def ranks(self) -> list[int]:
        return sorted(set(self.configs) | set(self.steps))


_RANK_FILE = re.compile(r"^(config|steps|window|memory|modules|leak-sites)-rank(\d+)\.jsonl?$")
_STACKS_FILE = re.compile(r"^stacks-rank(\d+)\.txt$")


def load_run(path: Path) -> RunData:
    """Load a run directory. Raises :class:`SchemaError` with the file's name when one is bad.

    Raises ``FileNotFoundError`` with what to do when ``path`` is not a run directory.
    """
    path = Path(path)
    if not (path / MANIFEST).is_file():
        raise FileNotFoundError(
            f"{path} is not a gpudoctor run directory (no {MANIFEST}); "
            "make one with `gpudoctor run -- python train.py`"
        )
    data = RunData(path=path, manifest=read_json(path / MANIFEST, RunManifest, kind=KIND_MANIFEST))
    for child in sorted(path.iterdir()):
        stacks = _STACKS_FILE.match(child.name)
        if stacks:
            data.stacks[int(stacks.group(1))] = child.read_text(encoding="utf-8", errors="replace")
            continue
        match = _RANK_FILE.match(child.name)
        if not match:
            continue
        what, rank = match.group(1), int(match.group(2))
        if what == "config":
            data.configs[rank] = read_json(child, RankConfig, kind=KIND_CONFIG)
        elif what == "steps":
            data.steps[rank] = read_steps(child)
        elif what == "memory":
            data.memory[rank] = list(read_jsonl(child, StageMemory, kind=KIND_MEMORY))
        elif what == "modules":
            data.modules[rank] = list(read_jsonl(child, ModuleMemory, kind=KIND_MODULES))
        elif what == "leak-sites":
            data.leak_sites[rank] = read_json(child, LeakSites, kind=KIND_LEAK_SITES)
        else:
            data.windows[rank] = read_json(child, WindowSummary, kind=KIND_WINDOW)
    if (path / GPU_SAMPLES).is_file():
        data.gpu = list(read_jsonl(path / GPU_SAMPLES, GpuSample, kind=KIND_GPU))
    if (path / HOST_SAMPLES).is_file():
        data.host = list(read_jsonl(path / HOST_SAMPLES, HostSample, kind=KIND_HOST))
    if (path / ENV).is_file():
        data.env = read_json(path / ENV, CheckReport, kind=KIND_ENV)
    snapshots = oom_files(path)
    if snapshots:  # the whole process's, else the lowest rank's
        data.oom = read_json(snapshots[0], OomSnapshot, kind=KIND_OOM)
    if (path / BENCH).is_file():
        data.copy_ceiling_gbs = copy_ceiling(path / BENCH)
    if (path / FINDINGS).is_file():
        stored = read_json(path / FINDINGS, FindingList, kind=KIND_FINDINGS)
        data.findings, data.findings_version = stored.findings, stored.analysis_version
    return data


def copy_ceiling(path: Path) -> float | None:
    """The pinned host-to-device GB/s of a saved ``gpudoctor bench copy --json`` (its largest
    buffer: the link's sustained rate), or ``None`` when the file holds none.

    Raises:
        SchemaError: the file is not JSON, worded with what to save there.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SchemaError(f"{path}: not the output of `gpudoctor bench copy --json` ({exc})") from None
    rows = [r for r in (data.get("results") or []) if isinstance(r, dict) and r.get("op") == "h2d_pinned"
            and r.get("unit") == "GB/s" and isinstance(r.get("median"), (int, float))]
    if not rows:
        return None
    return float(max(rows, key=lambda r: r.get("size_bytes") or 0)["median"])


def read_steps(path: Path) -> list[StepRecord]:
    """The step records of ``steps-rank{N}.jsonl``, in step order, the last line of each step.

    ``gpudoctor run``'s probes write a step at its boundary and again once its late values
    (GPU time, loss, scale) are in; the later line is the complete one.
    """
    by_step: dict[int, StepRecord] = {}
    for step in read_jsonl(path, StepRecord, kind=KIND_STEPS):
        by_step[step.step] = step
    return [by_step[k] for k in sorted(by_step)]


def oom_files(folder: Path) -> list[Path]:
    """The OOM snapshots in ``folder``: ``oom.json`` (a whole process), then ``oom-rank{N}.json``
    by rank number (under torchrun each rank writes its own)."""
    found = [(m.group(1), c) for c in Path(folder).glob("oom*.json") if (m := _OOM_FILE.fullmatch(c.name))]
    return [c for _, c in sorted(found, key=lambda rc: -1 if rc[0] is None else int(rc[0]))]


__all__ = ["FindingList", "RunData", "SchemaError", "load_run", "oom_files", "read_steps"]
