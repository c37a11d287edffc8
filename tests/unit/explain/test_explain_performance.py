"""A 10 MB multi-rank log must be explained in under 2 s (regexes compiled once, one scan)."""

from __future__ import annotations

import time

from gpudoctor.explain import explain_text, load_catalog

from .conftest import fixture_text

TEN_MB = 10 * 2**20


def _big_log() -> str:
    """8 ranks of NCCL INFO noise, progress lines, repeated warnings and step logs, with the
    fixture's failure (OOM on rank 3, watchdog timeouts elsewhere) at the end."""
    parts: list[str] = []
    size = step = 0
    while size < TEN_MB:
        rank = step % 8
        for line in (
            f"gpu-node-1:3018451:30240{rank} [{rank}] NCCL INFO Channel {step % 32:02d}/0 : "
            f"{rank}[{rank}] -> {(rank + 1) % 8}[{(rank + 1) % 8}] via P2P/IPC/read",
            f"[rank{rank}]: step {step} loss {1 / (step + 1):.5f} lr 3.0e-4 grad_norm 0.8{step % 97} "
            f"tokens/s {40000 + step % 9000}",
            f"[rank{rank}]:/usr/lib/python3.11/site-packages/torch/utils/checkpoint.py:91: "
            "UserWarning: None of the inputs have requires_grad=True. Gradients will be None",
            f"[rank{rank}]: Epoch 3: {step % 100}%|####      | {step}/100000 [01:23<02:34, 12.3it/s, "
            f"loss=0.{step % 1000}]",
        ):
            parts.append(line)
            size += len(line) + 1
        step += 1
    parts.append(fixture_text("ddp_oom_rank3_watchdog.log"))
    return "\n".join(parts)


def test_ten_megabyte_log_under_two_seconds() -> None:
    load_catalog()  # loading and compiling the catalog once is not part of the per-log cost
    text = _big_log()
    assert len(text) >= TEN_MB
    best = float("inf")
    for _ in range(2):  # best of two: the test machine is shared
        start = time.perf_counter()
        report = explain_text(text)
        best = min(best, time.perf_counter() - start)
    assert [m.entry_id for m in report.matches] == ["oom-fragmentation", "nccl-watchdog-timeout"]
    assert report.launcher is not None and report.launcher.rank == 3
    assert best < 2.0, f"explaining 10 MB took {best:.2f} s"


def test_length_changing_lower_case_keeps_the_fast_path() -> None:
    """'İ'.lower() is two characters: a 10 MB log full of it must stay as fast as plain ASCII
    (it took 19.5 s for 50 MB when such logs fell back to a per-line, per-trigger scan)."""
    load_catalog()
    lines = [f"step {i} loss 2.{i % 97} İstanbul WARNING: retrying İİ" for i in range(210_000)]
    text = "\n".join(lines) + "\nRuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    assert len(text) >= TEN_MB
    took = float("inf")
    for _ in range(2):  # best of two: the test machine is shared
        start = time.perf_counter()
        report = explain_text(text)
        took = min(took, time.perf_counter() - start)
    assert report.matches and report.matches[0].entry_id.startswith("oom")
    assert took < 2.0, f"explaining 10 MB with 'İ' took {took:.2f} s"
