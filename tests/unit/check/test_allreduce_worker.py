"""The all-reduce pair the probe starts, run with gloo on the CPU: the same start / release /
collect code as on GPUs, and a sum that must be right."""

from __future__ import annotations

import pytest

from gpudoctor.collectors.env.probe import finish_nccl, start_nccl_workers

pytestmark = pytest.mark.distributed


def test_gloo_pair_gives_the_right_sum():
    workers = start_nccl_workers(2, backend="gloo", extra=("--numel", "1024"))
    result = finish_nccl(workers, timeout_s=60)
    assert result.status == "ok", result.error
    assert result.got == result.expected == 3.0 and result.bytes == 4096 and result.ms is not None


def test_one_gpu_starts_no_workers():
    assert start_nccl_workers(1) is None
    assert finish_nccl(None, timeout_s=1).status == "failed"


def test_a_rank_that_never_joins_times_out():
    workers = start_nccl_workers(2, backend="gloo", extra=("--numel", "1024"))
    workers[1].kill()  # rank 0 waits for a peer that is gone
    result = finish_nccl(workers, timeout_s=4)
    assert result.status in ("timeout", "failed")
