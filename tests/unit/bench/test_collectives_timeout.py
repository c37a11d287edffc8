"""``launch_collectives`` on a timeout: a skip saying so, and torchrun's whole process group killed
(the killing itself: ``tests/unit/core/test_process_group.py``)."""

from __future__ import annotations

import subprocess
import time

from gpudoctor.bench import collectives


def test_a_timed_out_launch_is_a_skip_and_goes_through_the_group_runner(monkeypatch) -> None:
    calls = []

    def timing_out(cmd, *, env, timeout_s):
        calls.append((cmd, timeout_s))
        raise subprocess.TimeoutExpired(cmd, timeout_s)

    monkeypatch.setattr(collectives, "run_process_group", timing_out)
    results, skipped = collectives.launch_collectives(2, timeout_s=7.0)
    assert results == [] and [(s.section, s.what, s.reason) for s in skipped] == [
        ("collectives", "torchrun", "timed out after 7 s")]
    assert calls[0][0][1:4] == ["-m", "torch.distributed.run", "--standalone"] and calls[0][1] == 7.0


def test_a_real_launch_past_its_timeout_is_a_skip_not_an_exception() -> None:
    # one second is too short for torchrun to start two ranks: the group is killed, nothing raised
    t0 = time.monotonic()
    results, skipped = collectives.launch_collectives(2, quick=True, timeout_s=1.0)
    assert results == [] and skipped[0].reason == "timed out after 1 s"
    assert time.monotonic() - t0 < 30  # killed and reaped, not waited out
