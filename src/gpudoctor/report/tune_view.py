"""The ``gpudoctor tune`` view: the seeds' control-variable table for every knob (each setting
tried, its throughput with the spread of its repeated runs, step time, data wait, peak memory and
verdict), the winner marked, the knob's summary and notes, then the confirmation and what was
written (or why nothing was). Pure rendering of a :class:`TuneResult`."""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpudoctor.records.tune import KnobResult, Trial, TrialVerdict, TuneResult
from gpudoctor.records.units import MISSING, human_bytes
from gpudoctor.records.units import figure as _num
from gpudoctor.report.fit import Fit

_STYLE = {
    TrialVerdict.OK: "green",
    TrialVerdict.OOM: "red",
    TrialVerdict.REJECTED: "yellow",
    TrialVerdict.FAILED: "bold red",
    TrialVerdict.SKIPPED: "dim",
}
_TITLES = {
    "plan": "Reference run and budget plan (the starting configuration)",
    "confirm": "Confirmation: tuned vs starting configuration (as training runs them; interleaved)",
    "fallback": "Fallback: part of the tuned configuration vs starting (as training runs them; interleaved)",
    "script:plan": "Reference run (the script as written)",
    "precision": "Precision (data on the GPU; per rank)",
    "batch": "Batch size (real steps; per rank)",
    "loader": "DataLoader (real loader; per rank)",
    "scaler": "GradScaler (fp16)",
    "ddp": "DDP (slowest rank)",
    "script:precision": "Precision switches (fresh run of the script each)",
    "script:loader": "DataLoader (fresh run of the script each)",
    "script:result": "Confirmation and result: the script as written vs the chosen --try (interleaved)",
}


def _spread(trial: Trial) -> str:
    if trial.spread is None:
        return MISSING
    return f"±{trial.spread:.1%} ({len(trial.rates)})"


def _mem(value: int | None) -> str:
    return human_bytes(value, digits=2)


def _verdict(trial: Trial) -> Text:
    text = Text(trial.verdict.value, style=_STYLE[trial.verdict])
    if trial.reason:
        text.append(f" {trial.reason}", style="dim")
    if trial.skipped_steps is not None:
        text.append(f" skipped {trial.skipped_steps}", style="")
    return text


def trial_line(trial: Trial) -> str:
    """One line per finished trial, for the live progress display."""
    rate = f"{_num(trial.samples_per_s)} samples/s" if trial.samples_per_s else trial.verdict.value
    if trial.samples_per_s and trial.spread is not None:
        rate += f" ±{trial.spread:.1%} over {len(trial.rates)} runs"
    tail = f" ({trial.reason})" if trial.reason and trial.verdict is not TrialVerdict.OK else ""
    return f"{trial.knob:<10} {trial.setting:<44} {rate}{tail}"


def knob_table(knob: KnobResult) -> Table:
    """One knob's trials; the winner's row is marked with ``*``."""
    table = Table(title=_TITLES.get(knob.knob, knob.knob), box=box.SIMPLE_HEAD, title_justify="left",
                  show_edge=False)
    table.add_column("", width=1)
    table.add_column("setting", min_width=min(24, max((len(t.setting) for t in knob.trials), default=10)))
    table.add_column("samples/s", justify="right", no_wrap=True)
    table.add_column("spread", justify="right", no_wrap=True)
    table.add_column("verdict", min_width=10, ratio=1)  # before the detail columns: a narrow terminal keeps it
    table.add_column("step ms", justify="right")
    table.add_column("wait ms", justify="right")
    table.add_column("peak mem", justify="right")
    marked = False
    for trial in knob.trials:
        win = not marked and knob.winner is not None and trial.setting == knob.winner
        marked = marked or win
        table.add_row("*" if win else "", trial.setting, _num(trial.samples_per_s), _spread(trial), _verdict(trial),
                      _num(trial.step_ms), _num(trial.data_wait_ms), _mem(trial.peak_mem_bytes),
                      style="bold" if win else None)
    return table


def _knob_block(knob: KnobResult) -> list[RenderableType]:
    parts: list[RenderableType] = []
    if knob.trials:
        parts.append(Fit(knob_table(knob)))  # stacked when the terminal is too narrow
    else:
        parts.append(Text(_TITLES.get(knob.knob, knob.knob), style="italic"))
    verdict_only = knob.knob in ("plan", "confirm", "fallback", "script:plan", "script:result")
    head = Text("  winner: " if knob.winner and not verdict_only else "  result: ", style="bold")
    head.append(knob.summary or "none")
    parts.append(head)
    for note in knob.notes:
        parts.append(Text(f"  - {note}"))
    parts.append(Text(""))
    return parts


def render_tune(result: TuneResult) -> Group:
    """The whole run: a block per knob, then the outputs."""
    parts: list[RenderableType] = [
        Text(f"gpudoctor tune: {result.target} on {result.device}"
             + (f", {result.world_size} ranks agreeing" if result.world_size > 1 else "")
             + f" — {sum(len(k.trials) for k in result.knobs)} trials in {result.elapsed_s:.0f} s", style="bold"),
        Text(""),
    ]
    for knob in result.knobs:
        parts.extend(_knob_block(knob))
    if result.interrupted:
        parts.append(Text("interrupted (Ctrl-C): the trials above finished; the knobs after it were not tuned and "
                          "nothing was written", style="yellow"))
    if result.kept_start:
        parts.append(Text("nothing written: the tuned configuration was not faster than the starting one beyond the "
                          "noise (see the confirmation); keep your starting configuration", style="yellow"))
    elif not result.interrupted and any(k.knob == "fallback" for k in result.knobs):
        parts.append(Text("the result is the part of the tuned configuration the fallback confirmed, not the whole "
                          "(the stages it dropped, and why, are named above)", style="yellow"))
    if result.run_dirs:
        parts.append(Text(f"trial run directories (each child's output in its stdout.log): {result.run_dirs}"))
    if result.config_path:
        parts.append(Text(f"engine config written: {result.config_path}  (TrainConfig.from_file)"))
    if result.loader_path:
        parts.append(Text(f"loader settings written: {result.loader_path}  (LoaderSettings.from_file)"))
    return Group(*parts)
