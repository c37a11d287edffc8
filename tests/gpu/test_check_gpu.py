"""``gpudoctor check`` on real GPUs (run on a device machine: ``pytest -m gpu tests/gpu/test_check_gpu.py``,
or ``python3 tests/gpu/test_check_gpu.py`` where pytest is missing).

Every row must pass (warnings allowed, skips only for 2-GPU rows on 1 GPU) within 10 s; the
matmul must beat the CPU; with 2 GPUs P2P and the NCCL all-reduce must pass; a probe given too
little time must be reported as hung, not crash the check.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    import pytest

    pytestmark = pytest.mark.gpu
except ImportError:  # the device image may lack pytest; see the __main__ block
    pytest = None


class _Skip(Exception):
    pass


def _skip(reason: str) -> None:
    if pytest is not None:
        pytest.skip(reason)
    raise _Skip(reason)


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _check(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "gpudoctor", "check", *args],
                         capture_output=True, text=True, timeout=120)
    return out, time.perf_counter() - start


def test_every_row_passes_within_10_s():
    n = _gpu_count()
    if n == 0:
        _skip("no GPU")
    out, elapsed = _check("--json", "--fail-on", "error")  # a WARN row (e.g. TF32 off) is allowed here
    payload = json.loads(out.stdout)
    rows = {r["name"]: r for r in payload["results"]}
    failed = {k: r["evidence"] for k, r in rows.items() if r["verdict"] == "fail"}
    assert out.returncode == 0 and not failed, failed
    for i in range(n):
        for name in ("context", "memory", "matmul", "conv", "bf16_tf32", "arch"):
            assert rows[f"gpu{i}.{name}"]["verdict"] in ("pass", "warn"), rows[f"gpu{i}.{name}"]
        probe = payload["facts"]["devices"][i]
        assert probe["fp32_rel_err"] < 1e-4 and probe["cpu_fp32_ms"] / probe["fp32_ms"] > 10
    skips = {k for k, r in rows.items() if r["verdict"] == "skip"}
    assert skips <= ({"p2p", "nccl.allreduce"} if n == 1 else set()), skips
    if n >= 2:
        assert rows["nccl.allreduce"]["verdict"] == "pass" and payload["facts"]["nccl"]["got"] == 3.0
    assert payload["summary"].startswith("PASS")
    assert elapsed < 10.0, f"gpudoctor check took {elapsed:.1f} s"


def test_a_probe_with_too_little_time_is_reported_as_hung():
    if _gpu_count() == 0:
        _skip("no GPU")
    out, _ = _check("--json", "--timeout", "0.5")
    payload = json.loads(out.stdout)
    assert out.returncode == 1
    assert payload["facts"]["probe"]["status"] == "timeout"
    assert any(r["verdict"] == "fail" and "fuser -v /dev/nvidia*" in r["fix"]
               for r in payload["results"]) or payload["facts"]["torch"] is None


def test_freeze_and_against_itself():
    if _gpu_count() == 0:
        _skip("no GPU")
    with tempfile.TemporaryDirectory() as tmp:
        frozen = Path(tmp) / "env.json"
        out, _ = _check("--freeze", str(frozen), "--fail-on", "error")
        assert out.returncode == 0, out.stdout[-2000:]
        data = json.loads(frozen.read_text())["data"]
        assert data["torch_variant"].startswith("cu") and data["driver_version"]
        assert data["cudnn_version"] and data["nccl_version"]
        out, _ = _check("--json", "--against", str(frozen))
        assert json.loads(out.stdout)["differences"] == []


if __name__ == "__main__":
    failures = 0
    for name, fn in list(globals().items()):
        if name.startswith("test_") and callable(fn):
            try:
                fn()
                print(f"PASSED {name}")
            except _Skip as exc:
                print(f"SKIPPED {name}: {exc}")
            except Exception as exc:  # report every test, then fail the run
                failures += 1
                print(f"FAILED {name}: {type(exc).__name__}: {exc}")
    sys.exit(1 if failures else 0)
