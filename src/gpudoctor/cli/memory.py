"""``gpudoctor memory``: how much memory training needs, what fits, and why it ran out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

class _MemoryGroup(typer.core.TyperGroup):
    """``gpudoctor memory [run options] -- CMD...`` is ``gpudoctor memory run ... -- CMD...``."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if "--" in args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


memory_app = typer.Typer(
    cls=_MemoryGroup,
    help="Memory analysis: estimate the peak of training a model, run a script and see where its memory "
    "goes (`memory run -- CMD`, or `memory -- CMD`), or show why it ran out of memory.",
    no_args_is_help=True,
)


@memory_app.command("estimate")
def estimate(
    model: str = typer.Option(..., "--model", help="MODULE:FUNCTION or path/to/file.py:FUNCTION returning "
                              "the nn.Module, e.g. torchvision.models:resnet50 (modules in the current folder "
                              "are found)."),
    input_spec: str = typer.Option(..., "--input", help="image:CxHxW:CLASSES or tokens:SEQ:VOCAB."),
    batch_size: int = typer.Option(..., "--batch-size", "-b", help="Per-GPU batch size to estimate."),
    optimizer: str = typer.Option("adamw", "--optimizer", help="adamw, adam, sgd or sgd_momentum."),
    precision: str = typer.Option("fp32", "--precision", help="fp32, bf16 or fp16 (autocast)."),
    probes: str = typer.Option("", "--probes", help="Small batch sizes to run, e.g. 2,4 "
                               "(default: batch/8 and batch/4)."),
    device: str = typer.Option("auto", "--device", help="auto, cuda, cuda:N or cpu."),
    margin: float = typer.Option(0.1, "--margin", help="Share of GPU memory kept free."),
    json_output: bool = typer.Option(False, "--json", help="Print the estimate as JSON."),
    what_ifs: list[str] = typer.Option([], "--what-if", help="What a change would save: checkpointing, "
                                       "adafactor, adamw8bit or micro-batch=N (repeatable)."),
) -> None:
    """Estimate the peak memory of training MODEL at BATCH_SIZE before running it.

    Weights, gradients and optimizer state are counted; activations are measured by training two
    small batches for real and scaling linearly (on a GPU, the allocator's peaks; on a CPU, the
    tensors autograd saves). Also prints the largest batch that fits on the GPU.

    \b
    Examples:
      gpudoctor memory estimate --model torchvision.models:resnet50 \\
          --input image:3x224x224:1000 -b 64
      gpudoctor memory estimate --model mymodels.py:build \\
          --input tokens:1024:50257 -b 8 --precision bf16
      gpudoctor memory estimate --model torchvision.models:resnet50 \\
          --input image:3x224x224:1000 -b 256 \\
          --what-if checkpointing --what-if micro-batch=64
    """
    from gpudoctor.cli.output import emit_json, stdout_console
    from gpudoctor.cli.progress import Progress
    from gpudoctor.errors import GpuDoctorUserError
    from gpudoctor.memory.estimate import EstimateConfig, estimate_memory
    from gpudoctor.memory.inputs import batch_factory, load_factory
    from gpudoctor.report.memory_view import render_estimate

    try:
        probe_batches = tuple(int(v) for v in probes.split(",") if v.strip())
        config = EstimateConfig(batch_size=batch_size, optimizer=optimizer, precision=precision,
                                probe_batches=probe_batches, device=device, margin=margin)
    except ValueError as exc:
        raise GpuDoctorUserError(str(exc)) from None
    from gpudoctor.memory.whatif import parse_what_if, what_if

    try:
        for change in what_ifs:
            parse_what_if(change)
    except ValueError as exc:
        raise GpuDoctorUserError(str(exc)) from None
    with Progress() as progress:
        progress.stage(f"importing {model}")
        factory, make_batch = _reporting(load_factory(model), batch_factory(input_spec), config, progress, model)
        try:
            result = estimate_memory(factory, make_batch, config, model_name=model)
            from gpudoctor.memory.estimate import default_loss

            if what_ifs:
                progress.stage("answering --what-if")
            answers = [what_if(result, change, model_factory=factory, make_batch=make_batch, config=config,
                               loss_fn=default_loss) for change in what_ifs]
        except ValueError as exc:
            raise GpuDoctorUserError(str(exc)) from None
        except (RuntimeError, MemoryError) as exc:  # torch's OutOfMemoryError is a RuntimeError
            if not _out_of_memory(exc):
                raise
            raise GpuDoctorUserError(
                f"a probe batch ({', '.join(map(str, config.probes()))}) does not fit in memory on "
                f"{config.device}: give smaller ones with --probes, e.g. --probes 2,4") from None
    if json_output:
        from gpudoctor.records.base import to_dict

        emit_json({**to_dict(result), "what_if": to_dict(answers)} if answers else result)
    else:
        console = stdout_console()
        console.print(render_estimate(result))
        if answers:
            from gpudoctor.report.memory_modules_view import render_what_if

            console.print(render_what_if(answers))


def _out_of_memory(exc: BaseException) -> bool:
    """True for an allocation failure: CUDA's OutOfMemoryError, the CPU allocator's refusal."""
    text = str(exc).lower()
    return isinstance(exc, MemoryError) or "out of memory" in text or "can't allocate memory" in text


def _reporting(factory: Any, make_batch: Any, config: Any, progress: Any, spec: str) -> tuple[Any, Any]:
    """The model and batch factories, telling ``progress`` what the estimate is doing; a
    ``--model`` that cannot be called without arguments, or returns no ``nn.Module``, is a user
    error naming what it returned."""
    probes = config.probes()

    def build() -> Any:
        progress.stage("building the model")
        from gpudoctor.errors import GpuDoctorUserError

        hint = "--model must name a function that takes no arguments and returns the nn.Module"
        try:
            module = factory()
        except TypeError as exc:
            raise GpuDoctorUserError(f"--model {spec}: calling it failed "
                                     f"({str(exc).splitlines()[0]}); {hint}") from None
        import torch

        if not isinstance(module, torch.nn.Module):
            raise GpuDoctorUserError(f"--model {spec} returned a {type(module).__name__}, "
                                     f"not an nn.Module; {hint}")
        return module

    def batch(size: int, device: Any) -> Any:
        progress.stage(f"training probe batches on {device}", f"batch {size} (probes: "
                       f"{', '.join(str(p) for p in probes)})")
        return make_batch(size, device)

    return build, batch


@memory_app.command("run", context_settings={"allow_extra_args": True, "allow_interspersed_args": False},
                    options_metavar="[OPTIONS] [--] COMMAND [ARGS]...")
def run(
    ctx: typer.Context,
    steps: int = typer.Option(None, "--steps", help="Stop after N optimizer steps (the per-step curve; "
                              "default 20)."),
    full: bool = typer.Option(False, "--full", help="Let the script run to its end instead."),
    stages: int = typer.Option(3, "--stages", help="Probe each stage of the first K steps."),
    modules: bool = typer.Option(False, "--modules", help="Also the memory of each module's forward "
                                 "(kept and peak bytes, from forward hooks) in one probed step."),
    out: Path = typer.Option(None, "--out", "-o", help="Run directory: a new one (default gpudoctor-runs/<time>-<name>)."),
    force: bool = typer.Option(False, "--force", help="Let --out replace an earlier gpudoctor run there."),
    json_output: bool = typer.Option(False, "--json", help="Print JSON."),
    first_step_timeout: float = typer.Option(
        120.0, "--first-step-timeout", help="Stop the script if no optimizer step happens by then (s)."
    ),
) -> None:
    """Run a training command and show where its GPU memory goes, stage by stage.

    The command follows the options (the first word that is not one, or after --). Records the
    allocator at the model, batch, forward, backward and optimizer stages of the first K steps,
    the per-step curve, and on an out-of-memory error the live allocations by source line plus a
    snapshot for PyTorch's memory viewer. Needs a CUDA GPU
    for the figures. Memory mode resets the peak counter at each stage and records allocation
    stacks: use gpudoctor run for speed. The script's own exit code passes through.

    \b
    Examples:
      gpudoctor memory run -- python train.py --batch-size 64
      gpudoctor memory run --steps 20 --stages 2 -- python -m mypkg.train
      gpudoctor memory run --modules -- python train.py  # + each module's forward
    """
    from gpudoctor.cli.output import emit_json, stdout_console
    from gpudoctor.cli.progress import Progress
    from gpudoctor.collectors.launch import default_run_dir, resolve_command
    from gpudoctor.errors import GpuDoctorUserError
    from gpudoctor.memory.run import DEFAULT_STEPS, memory_run
    from gpudoctor.report.memory_view import render_memory_run

    command = tuple(ctx.args)
    if not command:
        raise GpuDoctorUserError("no command given; write it after --, e.g. gpudoctor memory run -- python train.py")
    if full and steps is not None:
        raise GpuDoctorUserError("--steps and --full contradict each other; give one of them")
    resolve_command(command)
    base = out if out is not None else default_run_dir(command)
    from gpudoctor.collectors import outdir

    outdir.claim(base, force=force)
    try:
        with Progress() as progress:
            result = memory_run(command, base, stages=stages,
                                steps=None if full else (steps if steps is not None else DEFAULT_STEPS),
                                first_step_timeout_s=first_step_timeout, modules=modules,
                                say=progress.say, echo=progress.echo, on_progress=progress.run)
            if result.outcome.message:
                progress.say(f"gpudoctor: {result.outcome.message}")
    except ValueError as exc:
        raise GpuDoctorUserError(str(exc)) from None
    outcome, report = result.outcome, result.report
    # An OOM is what this command diagnoses: it is reported, and the exit code says the script failed.
    if json_output:
        emit_json({"run_dir": str(outcome.run_dir), "manifest": outcome.manifest, "memory": report,
                   "exit_code": outcome.exit_code})
    else:
        stdout_console().print(render_memory_run(report, str(outcome.run_dir)))
    raise typer.Exit(outcome.exit_code)


@memory_app.command("show")
def show(
    path: Path = typer.Argument(..., metavar="PATH", help="An OOM snapshot (oom-rank0.json, oom.json) or the folder holding "
                                "them (the engine's robust.oom_dir / checkpoint.dir, a memory run directory)."),
    json_output: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show why an out-of-memory error happened, from the snapshot written at the error.

    Prints what was allocated, reserved and free, the top allocation sites (live bytes by the
    Python line that allocated them), the verdict (shortage or fragmentation) with the fixes
    ranked, and how to open the full snapshot in PyTorch's memory viewer. The engine
    (robust.oom_snapshot) and gpudoctor memory run write these files. A folder shows every rank's
    file.

    \b
    Examples:
      gpudoctor memory show gpudoctor-runs/20261201-101500-train
      gpudoctor memory show checkpoints/oom-rank0.json --json
    """
    from gpudoctor.analysis.oom import explain_oom, top_sites
    from gpudoctor.cli.output import emit_json, stdout_console
    from gpudoctor.core.memory_history import KIND_OOM, VIEWER_URL, find_oom_files
    from gpudoctor.errors import GpuDoctorUserError
    from gpudoctor.records.base import SchemaError, read_json, to_dict
    from gpudoctor.records.memory import OomSnapshot
    from gpudoctor.report.memory_view import render_oom_snapshot

    try:
        files = find_oom_files(path)
        snaps = [(f, read_json(f, OomSnapshot, kind=KIND_OOM)) for f in files]
    except FileNotFoundError as exc:
        raise GpuDoctorUserError(str(exc)) from None
    except SchemaError as exc:
        raise GpuDoctorUserError(f"{exc}; pass an oom.json / oom-rank*.json written by gpudoctor") from None
    shown = []
    for file, snap in snaps:
        sites, findings = top_sites(snap, limit=10), explain_oom(snap)
        shown.append((file, snap, sites, findings, _pickle_beside(file, snap.pickle_path)))
    if json_output:
        emit_json({"snapshots": [
            {"path": str(file), "figures": {k: v for k, v in to_dict(snap).items() if k != "blocks"},
             "live_blocks": len(snap.blocks), "sites": sites, "findings": findings, "pickle": pickle,
             "viewer": f"drag the pickle onto {VIEWER_URL}" if pickle else ""}
            for file, snap, sites, findings, pickle in shown]})
        return
    console = stdout_console()
    for file, snap, sites, findings, pickle in shown:
        console.print(render_oom_snapshot(snap, sites, findings, source=str(file), pickle_path=pickle))


def _pickle_beside(json_file: Path, recorded: str) -> str:
    """The full snapshot's path as seen from here: the recorded path may be relative to where the
    training ran, while the pickle is always written next to its JSON."""
    if not recorded:
        return ""
    beside = json_file.parent / Path(recorded).name
    return str(beside) if beside.is_file() else recorded


def register(app: typer.Typer) -> None:
    app.add_typer(memory_app, name="memory")
