"""``gpudoctor memory run``: run a training command in memory mode and analyse where the bytes went.

Same launcher as ``gpudoctor run`` (:func:`gpudoctor.collectors.launch.run_instrumented`), with
``memory_stages`` on and the profiler window off (the profiler's own buffers would show up in
the memory figures, and its window is not needed for a memory diagnosis).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpudoctor.analysis.memory_stages import MemoryRunReport, analyse_memory_run
from gpudoctor.collectors.launch import RunOutcome, RunSpec, run_instrumented
from gpudoctor.records.rundir import RunData, load_run

DEFAULT_STEPS = 20
DEFAULT_STAGES = 3


@dataclasses.dataclass(frozen=True)
class MemoryRun:
    outcome: RunOutcome
    run: RunData
    report: MemoryRunReport


def memory_run(
    command: tuple[str, ...], run_dir: Path, *, steps: int | None = DEFAULT_STEPS,
    stages: int = DEFAULT_STAGES, child_stdout_to_stderr: bool = True,
    first_step_timeout_s: float = 120.0, say: Callable[[str], None] | None = None,
    echo: Callable[[bytes], None] | None = None, on_progress: Callable[[Any], None] | None = None,
    modules: bool = False,
) -> MemoryRun:
    """Run ``command`` with the memory probes; load and analyse its run directory.

    ``say``, ``echo`` and ``on_progress`` go to :func:`run_instrumented` (messages, the script's
    output, its stage and step). ``modules``: also record each module's forward memory in one
    probed step (``--modules``).

    Raises:
        ValueError: bad ``steps``/``stages`` (worded with the fix).
        GpuDoctorUserError: the command cannot be started.
    """
    if stages < 1:
        raise ValueError(f"--stages {stages}: must be at least 1 (the first steps to probe)")
    spec = RunSpec(command=command, run_dir=run_dir, steps=steps, profile=False,
                   memory_stages=stages, memory_modules=modules, first_step_timeout_s=first_step_timeout_s,
                   child_stdout_to_stderr=child_stdout_to_stderr)
    outcome = run_instrumented(spec, say=say, echo=echo, on_progress=on_progress)
    run = load_run(outcome.run_dir)
    return MemoryRun(outcome=outcome, run=run, report=analyse_memory_run(run, modules_requested=modules))
