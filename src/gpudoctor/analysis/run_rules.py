"""The run as a whole: did it produce steps, did it crash, did it use a GPU at all."""

from __future__ import annotations

from gpudoctor.analysis.facts import RunFacts
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Finding, Severity
from gpudoctor.records.run import RunManifest

CODE_CPU_ONLY = "GD-RUN-CPU-ONLY"
CODE_NO_STEPS = "GD-RUN-NO-STEPS"
CODE_CRASHED = "GD-RUN-CRASHED"

_ERROR_LINES = 6  # the last lines of the child's error kept as evidence


def check_run_status(manifest: RunManifest, facts: RunFacts, th: Thresholds) -> list[Finding]:
    """A crash, or a script that never completed an optimizer step."""
    error = tuple(line for line in manifest.error.splitlines() if line.strip())[-_ERROR_LINES:]
    out = []
    if manifest.status == "crashed":
        out.append(Finding(
            code=CODE_CRASHED, severity=Severity.ERROR,
            title=f"The script crashed (exit code {manifest.exit_code})",
            evidence=error or ("no error text was captured; see stdout.log in the run directory",),
            fix="gpudoctor explain RUNDIR/stdout.log    # cause, how to verify, fix",
        ))
    if not facts.ranks:
        out.append(Finding(
            code=CODE_NO_STEPS, severity=Severity.ERROR,
            title="No optimizer step was recorded: nothing to diagnose",
            evidence=(f"run status: {manifest.status}",),
            fix=("# gpudoctor counts steps at optimizer.step(); make sure the script reaches it\n"
                 "# (a custom optimizer must subclass torch.optim.Optimizer), or raise --steps"),
        ))
    return out


def check_cpu_only(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """Say so when the run used no GPU: the GPU rules were skipped, host-side ones still ran."""
    if facts.on_gpu or not facts.ranks:
        return []
    return [Finding(
        code=CODE_CPU_ONLY, severity=Severity.INFO,
        title="CPU-only run: GPU rules skipped; data-loader and host-side checks still apply",
        evidence=("no rank used a CUDA device",),
        fix="python -c \"import torch; print(torch.cuda.is_available())\"   # then: gpudoctor check",
    )]


__all__ = ["CODE_CPU_ONLY", "CODE_CRASHED", "CODE_NO_STEPS", "check_cpu_only", "check_run_status"]
