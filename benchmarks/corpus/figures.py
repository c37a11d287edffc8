"""The figures of one recorded run directory, as the corpus tables quote them.

Step figures come from ``gpudoctor.analysis.run_stats.run_stats`` (the one source of step
statistics); the verdict from ``gpudoctor.analysis.diagnose.diagnose``; the breakdown
shares (compute, sync, data wait) and the GPU busy share from the facts the findings view
renders; the top kernels from ``window-rank0.json``. Parts of gpudoctor that a later version
renames are reported as missing (``"error"`` keys), never guessed.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

TOP_KERNELS = 5
KERNEL_NAME_CHARS = 110


def _stats(run) -> dict:
    from gpudoctor.analysis.run_stats import run_stats

    stats = run_stats(run)
    if not stats:
        return {}
    s = stats[0]
    out = {k: getattr(s, k, None) for k in ("steps", "step_ms", "throughput", "unit", "data_wait_ms",
                                             "gpu_ms", "host_syncs", "peak_mem_gb", "h2d_mb")}
    out["mean_step_ms"] = getattr(s, "mean_step_ms", None)
    return out


def _mean_step_ms(run) -> float | None:
    """Mean of the steady steps (the steps run_stats chose), when the module exposes them."""
    from gpudoctor.analysis import run_stats as rs

    steps = run.steps.get(0) or next(iter(run.steps.values()), [])
    if not steps or not hasattr(rs, "steady_steps"):
        return None
    kept = rs.steady_steps(steps, tuple(run.manifest.profile_window))
    return sum(s.step_ms for s in kept) / len(kept) if kept else None


def _breakdown(run) -> dict:
    from gpudoctor.analysis.facts import run_facts
    from gpudoctor.analysis.thresholds import Thresholds

    facts = run_facts(run, Thresholds())
    if not facts.ranks:
        return {}
    rf = facts.ranks[0]
    b = rf.breakdown
    # the mean step split by analysis.breakdown: what the GPU ran, what the host did meanwhile
    return {"breakdown_step_ms": b.step_ms, "compute_share": b.share("compute"),
            "host_share": b.share("host"), "data_wait_share": b.share("data"),
            "copy_share": b.share("copy"), "comm_share": b.share("comm"),
            "gpu_busy": rf.busy_frac, "on_gpu": facts.on_gpu}


def _findings(run) -> list[dict]:
    from gpudoctor.analysis.diagnose import diagnose

    return [{"code": f.code, "severity": f.severity.value, "title": f.title,
             "expected_gain": f.expected_gain, "fix": f.fix} for f in diagnose(run)]


def _window(run_dir: Path) -> dict:
    path = run_dir / "window-rank0.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text()).get("data", {})
    kernels = data.get("top_kernels") or []
    total = sum(k.get("total_us", 0.0) for k in kernels) or None
    busy_ms = data.get("gpu_busy_ms")
    return {
        "window_steps": [data.get("first_step"), data.get("last_step")],
        "window_wall_ms": data.get("wall_ms"), "window_gpu_busy_ms": busy_ms,
        "window_gpu_busy_frac": data.get("gpu_busy_frac"), "kernel_count": data.get("kernel_count"),
        "kernel_us_p50": data.get("kernel_us_p50"), "launch_count": data.get("launch_count"),
        "top_kernels": [
            {"name": k.get("name", "")[:KERNEL_NAME_CHARS], "count": k.get("count"),
             "total_us": round(k.get("total_us", 0.0), 1),
             # share of the GPU busy time of the window (kernel times can overlap; approximate)
             "share_of_busy": (k.get("total_us", 0.0) / 1000.0 / busy_ms) if busy_ms else None}
            for k in kernels[:TOP_KERNELS]],
        "top_kernels_listed_us": total,
    }


def console_text(run, width: int = 120) -> str:
    """The terminal summary and findings, as ``gpudoctor diagnose`` prints them."""
    from rich.console import Console

    from gpudoctor.cli import diagnose as diag

    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=False, color_system=None)
    diag.render(run, list(run.findings) if run.findings else diag.analyse(run), console)
    return buf.getvalue()


def read_run(run_dir: Path) -> dict:
    """Every figure of ``run_dir`` the tables need; a missing part is an ``error_<part>`` entry."""
    out: dict = {"run_dir": str(run_dir)}
    if not (run_dir / "manifest.json").is_file():
        out["error"] = "no manifest.json: gpudoctor did not start the run"
        return out
    from gpudoctor.records.rundir import load_run

    try:
        run = load_run(run_dir)
    except Exception as exc:  # noqa: BLE001 - a damaged run directory is a row, not a crash
        out["error"] = f"load_run: {type(exc).__name__}: {exc}"
        return out
    m = run.manifest
    out.update(status=m.status, exit_code=m.exit_code, steps_recorded=list(m.steps_recorded),
               crash_lines=m.error.splitlines()[-6:] if m.error else [])
    config = run.configs.get(0)
    if config is not None:
        out["device"] = getattr(config, "device_name", "") or getattr(config, "device", "")
    for part, fn in (("stats", lambda: _stats(run)), ("breakdown", lambda: _breakdown(run)),
                     ("findings", lambda: {"findings": _findings(run)}),
                     ("window", lambda: _window(run_dir))):
        try:
            out.update(fn())
        except Exception as exc:  # noqa: BLE001 - gpudoctor's internals move; say which part failed
            out[f"error_{part}"] = f"{type(exc).__name__}: {exc}"
    if out.get("mean_step_ms") is None:
        try:
            out["mean_step_ms"] = _mean_step_ms(run)
        except Exception as exc:  # noqa: BLE001
            out["error_mean"] = f"{type(exc).__name__}: {exc}"
    serious = [f for f in out.get("findings", []) if f["severity"] != "info"]
    top = serious[0] if serious else None
    out["verdict"] = ({"code": top["code"], "severity": top["severity"], "title": top["title"],
                       "expected_gain": top["expected_gain"]} if top else
                      {"code": None, "severity": None, "title": "no WARN/ERROR finding",
                       "expected_gain": None})
    return out
