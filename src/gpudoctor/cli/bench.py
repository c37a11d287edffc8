"""``gpudoctor bench [matmul|copy|collectives|loader|all]``: the measured ceilings of this machine."""

from __future__ import annotations

import typer


def _int_list(text: str, option: str) -> tuple[int, ...]:
    from gpudoctor.errors import GpuDoctorUserError

    try:
        return tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise GpuDoctorUserError(f"{option} {text!r}: give whole numbers separated by commas, e.g. 0,2,4") from None


def register(app: typer.Typer) -> None:
    @app.command()
    def bench(
        what: str = typer.Argument("all", help="matmul, copy, collectives, loader or all."),
        json_output: bool = typer.Option(False, "--json", help="Print the results as JSON."),
        nproc: int = typer.Option(
            0, "--nproc", help="Processes for collectives (torchrun); 0 = the GPU count, or 2 gloo processes on a CPU."
        ),
        sizes: str = typer.Option(
            "", "--sizes",
            help="Comma list: bare numbers are matmul N (8192), sizes with a unit are copy/collective buffers (1M,1G).",
        ),
        dtypes: str = typer.Option("", "--dtypes", help="Matmul dtypes, comma list of fp32,tf32,bf16,fp16,fp8."),
        quick: bool = typer.Option(False, "--quick", help="Fewer sizes and repeats."),
        dataset: str = typer.Option(
            "", "--dataset", help="Loader benchmark dataset: package.module:function or script.py[:name]."
        ),
        workers: str = typer.Option("0,2,4", "--workers", help="Loader num_workers values, comma list."),
        batch_size: int = typer.Option(64, "--batch-size", help="Loader batch size."),
    ) -> None:
        """Measure this machine's ceilings: matmul per dtype, copies, collectives, DataLoader.

        \b
        Examples:
          gpudoctor bench --quick
          gpudoctor bench matmul --dtypes bf16,fp16 --sizes 4096,8192
          gpudoctor bench collectives --nproc 8 --sizes 1M,256M
          gpudoctor bench loader --dataset mydata.py:make_dataset --workers 0,4,8
        """
        from gpudoctor.analysis.bench_rules import judge
        from gpudoctor.bench.suite import BenchOptions, parse_sizes, run_bench
        from gpudoctor.cli.output import EXIT_FINDINGS, emit_json, stdout_console
        from gpudoctor.errors import GpuDoctorUserError

        matmul_sizes, byte_sizes = parse_sizes(sizes)
        try:
            options = BenchOptions(
                what=what,
                dtypes=tuple(d.strip() for d in dtypes.split(",") if d.strip()),
                matmul_sizes=matmul_sizes,
                byte_sizes=byte_sizes,
                nproc=nproc or None,
                quick=quick,
                dataset=dataset,
                workers=_int_list(workers, "--workers"),
                batch_size=batch_size,
            )
        except ValueError as exc:
            raise GpuDoctorUserError(str(exc)) from None
        from gpudoctor.cli.progress import Progress

        with Progress() as progress:  # on stderr: a live line on a terminal, a line per section otherwise
            progress.stage("starting: importing torch, looking for GPUs")
            report = judge(run_bench(options, progress=lambda line: progress.stage(line.removeprefix("bench: "))))
        if json_output:
            emit_json(report)
        else:
            from gpudoctor.report.bench_view import render_bench

            stdout_console().print(render_bench(report))
        if report.low:
            raise typer.Exit(EXIT_FINDINGS)
