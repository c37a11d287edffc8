"""``pytest --gpu-log DIR``: a plain-text log of a test session, to commit beside the figures.

The GPU tier (``python -m pytest tests/gpu -m gpu``) runs on a GPU machine, never in CI, so its
result is only evidence if the log is kept. With ``--gpu-log DIR`` the session writes
``DIR/pytest-gpu-<N>gpu-<UTC time>.txt``: the command, the commit, torch/CUDA and the GPUs, the
summary line, every test's outcome and duration, what the tests printed (the bench tests print
their figures) and each failure's traceback. A new file each session (an existing one is never
overwritten); pytest prints its path ("GPU test log: ...").
"""

from __future__ import annotations

import platform
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

OPTION = "--gpu-log"


def add_option(parser: pytest.Parser) -> None:
    parser.addoption(OPTION, metavar="DIR", default=None,
                     help="Write a log of this session (outcomes, durations, output, failures, GPUs) "
                          "to DIR/pytest-gpu-<N>gpu-<time>.txt, to commit beside the figures.")


def configure(config: pytest.Config) -> None:
    folder = config.getoption(OPTION)
    if folder:
        config.pluginmanager.register(GpuLog(Path(folder), config), "gpudoctor-gpu-log")


def _git(root: Path, *args: str) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


def _machine() -> tuple[int, list[str]]:
    """(GPU count, description lines): torch, CUDA and each GPU's name and memory."""
    try:
        import torch
    except ImportError:
        return 0, ["torch: not installed"]
    lines = [f"torch {torch.__version__}, CUDA {torch.version.cuda}"]
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for i in range(count):
        props = torch.cuda.get_device_properties(i)
        lines.append(f"GPU {i}: {props.name}, {props.total_memory / 2**30:.0f} GiB, "
                     f"compute capability {props.major}.{props.minor}")
    if not count:
        lines.append("GPUs: none visible to torch (the gpu tests skip)")
    return count, lines


class GpuLog:
    """The plugin: collects every test's report and writes the log when the session ends."""

    def __init__(self, folder: Path, config: pytest.Config) -> None:
        self.folder, self.config = folder, config
        self.reports: list[pytest.TestReport] = []
        self.started = time.time()
        self.path: Path | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or report.outcome != "passed":  # setup/teardown only when they fail or skip
            self.reports.append(report)

    def _target(self, gpus: int) -> Path:
        stamp = datetime.fromtimestamp(self.started, timezone.utc).strftime("%Y%m%d-%H%M%S")
        path = self.folder / f"pytest-gpu-{gpus}gpu-{stamp}.txt"
        n = 2
        while path.exists():  # never overwrite an earlier log
            path = self.folder / f"pytest-gpu-{gpus}gpu-{stamp}-{n}.txt"
            n += 1
        return path

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        root = Path(str(self.config.rootpath))
        gpus, machine = _machine()
        outcomes = Counter(_outcome(r) for r in self.reports)
        wall = time.time() - self.started
        summary = ", ".join(f"{n} {what}" for what, n in sorted(outcomes.items())) or "no tests ran"
        dirty = " (uncommitted changes)" if _git(root, "status", "--porcelain", "--untracked-files=no") else ""
        lines = [
            "# gpudoctor GPU test log",
            f"command: {' '.join([Path(sys.executable).name, '-m', 'pytest', *self.config.invocation_params.args])}",
            f"started: {datetime.fromtimestamp(self.started, timezone.utc).isoformat(timespec='seconds')}",
            f"commit: {_git(root, 'rev-parse', 'HEAD') or 'unknown'}{dirty}",
            f"host: {platform.node()}, Python {platform.python_version()}",
            *machine,
            f"result: {summary} in {wall:.1f} s (pytest exit status {int(exitstatus)})",
            "",
        ]
        for r in self.reports:
            lines.append(f"{_outcome(r).upper():8} {r.nodeid}  ({r.duration:.2f} s, {r.when})")
            if r.skipped and isinstance(r.longrepr, tuple):
                lines.append(f"         {r.longrepr[2]}")
        printed = [(r.nodeid, r.capstdout) for r in self.reports if r.capstdout.strip()]
        if printed:
            lines += ["", "## what the tests printed"]
            for nodeid, out in printed:
                lines += [f"--- {nodeid}", out.rstrip()]
        failed = [r for r in self.reports if r.failed]
        if failed:
            lines += ["", "## failures"]
            for r in failed:
                lines += [f"--- {r.nodeid} ({r.when})", r.longreprtext.rstrip()]
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self._target(gpus)
        self.path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.path is not None:
            terminalreporter.write_line(f"GPU test log: {self.path}")


def _outcome(report: pytest.TestReport) -> str:
    if report.failed:
        return "failed" if report.when == "call" else "error"
    return "skipped" if report.skipped else "passed"
