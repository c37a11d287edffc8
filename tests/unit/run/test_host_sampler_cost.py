"""The stack sampler costs nothing measurable on normal steps (``benchmarks/host_work_cost.py``):
its thread wakes about once per ``min_slow_s`` and uses a small share of one core."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from cli_runner import env

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "host_work_cost.py"


def test_the_sampler_sleeps_through_normal_steps() -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--json", "--steps", "200", "--rounds", "3"],
                         env=env(), capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    fig = json.loads(out.stdout)
    from gpudoctor.collectors.instrument.host_sampler import CONFIG

    round_s = fig["steps_per_round"] * fig["mean_step_ms_with_sampler_median"] / 1000.0
    # one wake per deadline at most (a deadline is at least min_slow_s away), and a few spare
    assert fig["sampler_wakes_last_round"] <= round_s / CONFIG.min_slow_s * 1.5 + 3, fig
    cpu = fig["sampler_thread_cpu_frac_median"]
    assert cpu is None or cpu < 0.02, fig  # 0.14% of the wall time on a loaded 2-core machine
    assert fig["end_step_us"] < 50, fig
