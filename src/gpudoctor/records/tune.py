"""Auto-tuning results: every trial ``gpudoctor tune`` ran, and what it chose.

A :class:`Trial` is one measured setting of one knob (a row of the seeds' control-variable table:
setting -> throughput, step time, peak memory, verdict). A :class:`KnobResult` is one knob's sweep
and its winner; a :class:`TuneResult` holds every knob tuned in one run and the configuration the
tuner wrote.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from gpudoctor.records.base import record

KIND_TUNE = "tune_result"


class TrialVerdict(enum.Enum):
    """How one trial ended.

    ``OK``: it ran its steps and was measured. ``OOM``: ``torch.OutOfMemoryError`` (classified by
    type). ``REJECTED``: it ran, but the result is unusable (a non-finite loss, skipped scaler
    steps). ``FAILED``: another error, or it did not really execute its steps. ``SKIPPED``: not run,
    with the reason (a CUDA-only setting on a CPU machine, a knob that cannot be injected).
    """

    OK = "ok"
    OOM = "oom"
    REJECTED = "rejected"
    FAILED = "failed"
    SKIPPED = "skipped"


@record
class Trial:
    """One measured setting.

    Attributes:
        knob: ``batch``, ``eval_batch``, ``loader``, ``precision``, ``scaler`` or ``ddp``.
        setting: the setting in words, e.g. ``batch=256`` or ``bf16 channels_last``.
        params: the setting as plain values (what the config gets if it wins).
        verdict: how the trial ended.
        reason: why it was rejected/failed/skipped ("" when ok).
        steps: optimizer steps (or eval batches) really executed.
        samples_per_s: steady-state throughput (per rank), or ``None`` when not measured.
        step_ms: median steady-state step time on the host clock.
        data_wait_ms: median time per step spent waiting for the loader.
        peak_mem_bytes: peak allocated GPU memory during the trial (``None`` on the CPU).
        loss: the last loss seen (precision/scaler loss check), or ``None``.
        skipped_steps: optimizer steps the GradScaler skipped (fp16 only), or ``None``.
        scaler_scale: the GradScaler's scale after the last step (fp16 only), or ``None``.
        wall_s: how long the trial took, set-up included.
        rates: samples/s of each repeat of this setting (``samples_per_s`` is their median);
            empty when the setting ran once.
        spread: half the range of ``rates`` as a fraction of their median (0.02 = +-2%), or
            ``None`` when the setting ran once.
    """

    knob: str
    setting: str
    params: dict[str, Any]
    verdict: TrialVerdict
    reason: str = ""
    steps: int = 0
    samples_per_s: float | None = None
    step_ms: float | None = None
    data_wait_ms: float | None = None
    peak_mem_bytes: int | None = None
    loss: float | None = None
    skipped_steps: int | None = None
    scaler_scale: float | None = None
    wall_s: float = 0.0
    rates: tuple[float, ...] = ()
    spread: float | None = None


@record
class KnobResult:
    """One knob's sweep.

    Attributes:
        knob: the knob's name.
        trials: every trial, in the order run.
        winner: the chosen trial's ``setting``, or ``None`` when nothing usable was found.
        params: the chosen values (written into the config).
        summary: one or two sentences a person reads: what was chosen and why.
        notes: extra facts (caps applied, the throughput knee, skipped settings).
    """

    knob: str
    trials: tuple[Trial, ...] = ()
    winner: str | None = None
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    summary: str = ""
    notes: tuple[str, ...] = ()


@record
class TuneResult:
    """A whole ``gpudoctor tune`` run.

    Attributes:
        target: what was tuned (``module:function`` or the script command).
        device: where the trials ran (``cuda:0 (NVIDIA H200)``, ``cpu``).
        world_size: ranks that agreed on the result (torchrun), 1 otherwise.
        knobs: one result per knob, in the order tuned.
        config: the tuned ``TrainConfig`` as plain data (empty for a plain script).
        loader: the tuned loader settings (``num_workers``, ..., ``eval_batch_size``).
        config_path: where the engine config was written, or ``None``.
        loader_path: where the loader settings were written, or ``None``.
        elapsed_s: wall time of the whole run.
        interrupted: Ctrl-C stopped it; the trials finished before it are kept.
        plan: the budget plan in words: what each stage was given and what was cut, with what
            it would have needed.
        kept_start: the confirmation trial found the tuned configuration no faster than the
            starting one, so nothing was written (the reason is in the ``confirm`` knob).
        run_dirs: where script-mode trials left their run directories (empty once removed).
    """

    target: str
    device: str
    world_size: int = 1
    knobs: tuple[KnobResult, ...] = ()
    config: dict[str, Any] = dataclasses.field(default_factory=dict)
    loader: dict[str, Any] = dataclasses.field(default_factory=dict)
    config_path: str | None = None
    loader_path: str | None = None
    elapsed_s: float = 0.0
    interrupted: bool = False
    plan: tuple[str, ...] = ()
    kept_start: bool = False
    run_dirs: str | None = None
