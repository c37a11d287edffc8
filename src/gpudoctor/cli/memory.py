"""``gpudoctor memory``: how much memory training needs, and what fits."""

from __future__ import annotations

import typer

memory_app = typer.Typer(
    help="Memory analysis: estimate the peak of training a model, activations included.",
    no_args_is_help=True,
)


@memory_app.command("estimate")
def estimate(
    model: str = typer.Option(..., "--model", help="MODULE:FUNCTION returning the nn.Module, "
                              "e.g. torchvision.models:resnet50."),
    input_spec: str = typer.Option(..., "--input", help="image:CxHxW:CLASSES or tokens:SEQ:VOCAB."),
    batch_size: int = typer.Option(..., "--batch-size", "-b", help="Per-GPU batch size to estimate."),
    optimizer: str = typer.Option("adamw", "--optimizer", help="adamw, adam, sgd or sgd_momentum."),
    precision: str = typer.Option("fp32", "--precision", help="fp32, bf16 or fp16 (autocast)."),
    probes: str = typer.Option("", "--probes", help="Small batch sizes to run, e.g. 2,4 "
                               "(default: batch/8 and batch/4)."),
    device: str = typer.Option("auto", "--device", help="auto, cuda, cuda:N or cpu."),
    margin: float = typer.Option(0.1, "--margin", help="Share of GPU memory kept free."),
    json_output: bool = typer.Option(False, "--json", help="Print the estimate as JSON."),
) -> None:
    """Estimate the peak memory of training MODEL at BATCH_SIZE before running it.

    Weights, gradients and optimizer state are counted; activations are measured by training two
    small batches for real and scaling linearly (on a GPU, the allocator's peaks; on a CPU, the
    tensors autograd saves). Also prints the largest batch that fits on the GPU.
    """
    from gpudoctor.cli.output import emit_json, stdout_console
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
    factory = load_factory(model)
    make_batch = batch_factory(input_spec)
    try:
        result = estimate_memory(factory, make_batch, config, model_name=model)
    except ValueError as exc:
        raise GpuDoctorUserError(str(exc)) from None
    if json_output:
        emit_json(result)
    else:
        stdout_console().print(render_estimate(result))


def register(app: typer.Typer) -> None:
    app.add_typer(memory_app, name="memory")
