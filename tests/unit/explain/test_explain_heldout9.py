"""The ninth held-out set (tests/fixtures/explain_heldout9, judged by
``benchmarks/explain_heldout.py --set explain_heldout9``): another population than rounds one to eight
(GitHub issues): Q&A pages, forum threads and blog posts met through plain user queries, taken in rank
order (cases.toml says which queries and which pages were skipped), and the general fixes it led to.

The fixes are tested on message forms other than the held-out logs, so they are not fitted to one
page's wording.
"""

from __future__ import annotations

import pytest

from .conftest import EXPLAIN_FIXTURES, check_fresh_set, check_heldout_case, heldout_cases, issue_key, top_cause

HELDOUT9 = EXPLAIN_FIXTURES.parent / "explain_heldout9"
CASES = heldout_cases("explain_heldout9")


def test_the_set_is_29_public_pages_none_from_earlier_rounds_or_a_catalog_sample() -> None:
    check_fresh_set("explain_heldout9", 29, pages=True)


@pytest.mark.parametrize("name", sorted(CASES))
def test_heldout9_case_gets_its_root_cause_or_an_honest_unknown(name: str) -> None:
    check_heldout_case(HELDOUT9, name, CASES[name])


# --- the freshness key on non-GitHub addresses -----------------------------------------------------

@pytest.mark.parametrize(("a", "b"), [
    # one Discourse topic cited with another slug or another post number
    ("https://discuss.pytorch.org/t/training-on-multi-gpus-out-of-memory/55592/2",
     "https://discuss.pytorch.org/t/renamed-title/55592"),
    # a Stack Overflow question and its kiwix mirror
    ("https://stackoverflow.com/questions/46041201/matrix-multiplication-using-cublas-on-alea-gpu",
     "https://kiwix.lema.org/stackoverflow.com_en_all_2023-11/questions/46041201/matrix-multiplication"),
    # scheme, www., fragment, trailing slash and case
    ("http://www.Saturncloud.io/blog/how-to-solve/#fixes", "https://saturncloud.io/blog/how-to-solve"),
])
def test_one_page_cited_two_ways_has_one_key(a: str, b: str) -> None:
    assert issue_key(a) == issue_key(b)


def test_different_pages_on_one_site_keep_different_keys() -> None:
    assert issue_key("https://taourl.com/read-2964660.html") != issue_key("https://taourl.com/read-2265443.html")
    assert issue_key("https://discuss.pytorch.org/t/a/6795") != issue_key("https://discuss.pytorch.org/t/a/55592")
    assert issue_key("https://github.com/pytorch/pytorch/issues/1") == "pytorch/pytorch#1"


# --- the fixes, on forms outside the held-out set -------------------------------------------------

def _first(text: str) -> str | None:
    return top_cause(text)[0]


@pytest.mark.parametrize("text", [
    # the second half alone, two GPUs (a model split across cuda:1 and cuda:0)
    "...but found at least two devices, cuda:1 and cuda:0!\n",
    # shortened by hand with an ellipsis, another error class
    "ValueError: ... found at least two devices, cpu and cuda:0\n",
])
def test_the_second_half_of_the_device_mismatch_message_is_enough(text: str) -> None:
    assert _first(text) == "tensors-on-different-devices", top_cause(text)[1]


def test_finding_two_cuda_devices_at_startup_is_not_a_mismatch() -> None:
    assert "tensors-on-different-devices" not in top_cause("INFO: found 2 CUDA devices, using cuda:0\n")[1]


def test_a_retyped_comma_in_the_dtype_message_with_bf16() -> None:
    assert _first("RuntimeError: expected scalar type BFloat16, but found Float\n") == "dtype-mismatch"


@pytest.mark.parametrize("text", [
    "RuntimeError: DataLoader worker (pid(s) 4242, 4243) exited unexpectedly\n",  # torch's own form still
    "ERROR: DataLoader worker exited unexpectedly with exit code 1\n",
])
def test_dataloader_worker_exited_with_or_without_its_pid_list(text: str) -> None:
    assert _first(text) == "dataloader-worker-exited", top_cause(text)[1]


def test_another_servers_worker_exit_is_not_a_dataloader_worker() -> None:
    assert "dataloader-worker-exited" not in top_cause("[ERROR] Worker (pid:812) exited unexpectedly\n")[1]


@pytest.mark.parametrize("status", ["CUBLAS_STATUS_MAPPING_ERROR", "CUBLAS_STATUS_LICENSE_ERROR",
                                    "CUBLAS_STATUS_NOT_INITIALIZE"])
def test_any_cublas_failure_status_is_a_cublas_error(status: str) -> None:
    assert _first(f"RuntimeError: CUDA error: {status} when calling `cublasCreate(handle)`\n") == "cublas-status-error"


def test_cublas_success_is_not_an_error() -> None:
    assert "cublas-status-error" not in top_cause("cublasLt returned CUBLAS_STATUS_SUCCESS\n")[1]


@pytest.mark.parametrize("text", [
    "My training gets stuck after the first epoch when using DistributedDataParallel\n",
    "dist.all_reduce() never returns on the second node\n",
    "The job freezes at step 1200 with torchrun --nproc_per_node=8\n",
])
def test_a_distributed_hang_in_words_is_a_collective_hang(text: str) -> None:
    assert _first(text) == "collective-hang", top_cause(text)[1]


@pytest.mark.parametrize("text", [
    "training hangs after a few iterations\n",  # no distributed context: could be the DataLoader
    # torch 2.3+'s heartbeat monitor: its own entry, not a hang in words
    "[rank0]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 0] ProcessGroupNCCL's watchdog got stuck for 480 seconds "
    "without making progress in monitoring enqueued collectives.\n",
])
def test_a_hang_without_distributed_context_or_the_heartbeat_monitor_is_not_claimed_here(text: str) -> None:
    assert "collective-hang" not in top_cause(text)[1]


@pytest.mark.parametrize("text", [
    "the GPU sits idle waiting for the data loader most of the time\n",
    "Our 8 GPUs are starved for data: the input pipeline cannot keep up\n",
])
def test_a_gpu_waiting_on_its_input_in_words_is_low_utilization(text: str) -> None:
    assert _first(text) == "low-gpu-utilization", top_cause(text)[1]


def test_a_gpu_waiting_on_another_rank_is_not_low_utilization() -> None:
    assert "low-gpu-utilization" not in top_cause("rank 3: GPU is waiting for rank 1 to join the all_reduce\n")[1]
