"""``gpudoctor.watch``: diagnose training in the current process — a script, a notebook cell, a rank.

::

    import gpudoctor

    with gpudoctor.watch(steps=60) as w:
        train()          # your loop, unchanged
    w.findings           # the diagnosis, most important first
    w.run_dir            # a normal run directory: gpudoctor diagnose / report read it
    w.report()           # rich text in a terminal; the HTML report in a notebook
    w                    # as a notebook cell's last line: the HTML report (_repr_html_)

The same probes and profiler window ``gpudoctor run`` puts into a child process go into this one
(:mod:`gpudoctor.collectors.inprocess`); after ``steps`` optimizer steps (or at the end of the
``with`` block, whichever comes first) everything is written and the probes come out again,
while the loop goes on. On CUDA, ``run``'s online leak check comes along
(:mod:`~gpudoctor.collectors.instrument.leak_probe`): a leak's allocation sites are recorded for a
few steps and named in the leak finding, those steps left out of the steady figures. Under
torchrun every rank calls it; each writes its own rank's files into
one directory (``gpudoctor-runs/watch-<run id>``).
"""

from __future__ import annotations

import html
import os
import sys
from pathlib import Path
from typing import Any

from gpudoctor.collectors.inprocess import InProcessProbes, WatchSpec, default_watch_dir


class Watch:
    """One observation of the current process; use it as a context manager (see :func:`watch`)."""

    def __init__(self, spec: WatchSpec, *, quiet: bool = False) -> None:
        self.spec = spec
        self.quiet = quiet
        self._probes = InProcessProbes(spec)
        self._findings: list | None = None
        self._run: Any = None

    @property
    def run_dir(self) -> Path:
        """The run directory (``gpudoctor diagnose``/``report`` read it); under ``gpudoctor run``,
        that run's directory."""
        return self._probes.run_dir

    @property
    def status(self) -> str:
        """``running``, ``stopped`` (``steps`` reached), ``completed`` (the block ended first),
        ``no_steps``, ``crashed`` (the block raised), ``interrupted`` (Ctrl-C), or ``delegated`` (under ``gpudoctor run``,
        which observes the process itself and reports at its end)."""
        return self._probes.status

    def __enter__(self) -> Watch:
        self._probes.start()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if self._probes.delegated:
            return False
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            self._probes.end("interrupted")  # Ctrl-C, or a notebook's interrupt button
        elif exc_type is not None:
            self._probes.end("crashed", f"{exc_type.__name__}: {exc}")
        else:
            self._probes.end("completed")
        self._probes.close()
        if not self.quiet and exc_type is None and os.environ.get("RANK", "0") == "0":
            self._say()  # once per job under torchrun
        return False  # the user's exception goes on

    def stop(self) -> None:
        """End observation now (what leaving the ``with`` block does)."""
        self.__exit__(None, None, None)

    # ---- results -------------------------------------------------------------------------------

    def _load(self) -> Any:
        if not self._probes.ended:
            raise RuntimeError("the watch has not ended yet: read the results after the with block")
        if self._run is None:
            from gpudoctor.records.rundir import load_run

            self._run = load_run(self.run_dir)
        return self._run

    @property
    def findings(self) -> list:
        """The findings (:class:`~gpudoctor.records.finding.Finding`), most important first."""
        if self._probes.delegated:
            return []  # gpudoctor run diagnoses the whole run when it ends
        if self._findings is None:
            from gpudoctor.analysis.diagnose import diagnose

            run = self._load()
            self._findings = list(diagnose(run)) if run.steps else []
        return self._findings

    def renderable(self, top: int = 5) -> Any:
        """The terminal view (a rich renderable), as ``gpudoctor diagnose`` prints it."""
        from rich.console import Group

        from gpudoctor.report.findings_view import render_findings
        from gpudoctor.report.run_summary import render_summary

        run = self._load()
        parts = [render_summary(run, full=not run.steps)]
        if run.steps:
            parts.append(render_findings(run, self.findings, top=top))
        return Group(*parts)

    def report(self, *, top: int = 5, console: Any = None) -> None:
        """Show the diagnosis: the HTML report inside a notebook, rich text elsewhere."""
        if self._probes.delegated:
            print(f"gpudoctor run observes this process; its report: gpudoctor report {self.run_dir}")
            return
        if console is None and _in_notebook():
            from IPython.display import HTML, display

            display(HTML(self._repr_html_()))
            return
        if console is None:
            from rich.console import Console

            console = Console(file=sys.stdout, soft_wrap=False)
        console.print(self.renderable(top=top))

    def html(self) -> str:
        """The whole HTML report (what ``gpudoctor report`` writes) as a string."""
        from gpudoctor.report.html import render_report

        return render_report(self._load(), self.findings)

    def write_report(self, path: Path | None = None) -> Path:
        """Write the HTML report (default ``RUN_DIR/report.html``); return its path."""
        from gpudoctor.report.html import write_report

        return write_report(self._load(), self.findings, path)

    def _repr_html_(self) -> str:
        if self._probes.delegated:
            return f"<p>gpudoctor run observes this process: <code>{html.escape(str(self.run_dir))}</code></p>"
        if not self._probes.ended:
            return f"<p>gpudoctor.watch: observing, writing to <code>{html.escape(str(self.run_dir))}</code></p>"
        # In an iframe: the report is a whole page with its own styles and scripts.
        return ('<iframe style="width:100%;height:900px;border:1px solid #ddd" '
                f'srcdoc="{html.escape(self.html(), quote=True)}"></iframe>')

    def __repr__(self) -> str:
        return f"<gpudoctor.watch {self.status}: {self.run_dir}>"

    def _say(self) -> None:
        try:
            codes = [f.code for f in self.findings if f.severity.value != "info"]
        except Exception as exc:  # noqa: BLE001 - a summary line must not break the user's cell
            codes = [f"(not diagnosed: {exc})"]
        steps = self._probes.steps_recorded()
        head = ", ".join(codes[:3]) + (", ..." if len(codes) > 3 else "") if codes else "no problem found"
        print(f"gpudoctor: watched {steps} optimizer steps -> {self.run_dir}: {head}", file=sys.stderr)


def _in_notebook() -> bool:
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = getattr(ipython, "get_ipython", lambda: None)()
    return shell is not None and getattr(shell, "kernel", None) is not None


def watch(steps: int = 60, *, run_dir: str | Path | None = None, profile: bool = True,
          keep_trace: bool = False, trace_dir: str | Path | None = None, nvtx: bool = False,
          sample: bool = True, name: str = "watch", quiet: bool = False) -> Watch:
    """Observe the training that runs inside the ``with`` block, in this process.

    Args:
        steps: optimizer steps to observe (the profiler window takes the last 5 of them, as
            ``gpudoctor run --steps`` does); the loop goes on unobserved after them.
        run_dir: where the run directory goes (default ``gpudoctor-runs/<time>-<name>``); it
            must be new or empty.
        profile: take the profiler window.
        keep_trace: also keep the window's Chrome trace in the run directory.
        trace_dir: write the window's trace there in TensorBoard's profiler layout.
        nvtx: NVTX ranges around each step, optimizer step and data wait (CUDA only).
        sample: sample the GPUs (NVML) and the host in background threads.
        name: the run's name (default directory name).
        quiet: do not print the one-line summary at the end.
    """
    spec = WatchSpec(
        run_dir=Path(run_dir) if run_dir is not None else default_watch_dir(name),
        steps=steps, profile=profile, keep_trace=keep_trace,
        trace_dir=Path(trace_dir) if trace_dir is not None else None,
        nvtx=nvtx, sample=sample, name=f"gpudoctor.watch:{name}",
    )
    return Watch(spec, quiet=quiet)


__all__ = ["Watch", "watch"]
