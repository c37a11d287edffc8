"""The sixth held-out set (tests/fixtures/explain_heldout6, judged by
``benchmarks/explain_heldout.py --set explain_heldout6``) and the general fixes it led to.

The fixes are tested on message forms other than the held-out logs (other torch versions' wording,
other calls and devices), so they are not fitted to one issue's wording.
"""

from __future__ import annotations

import pytest


from .conftest import EXPLAIN_FIXTURES, check_fresh_set, check_heldout_case, heldout_cases, top_cause

HELDOUT6 = EXPLAIN_FIXTURES.parent / "explain_heldout6"
CASES = heldout_cases("explain_heldout6")


def test_the_set_is_30_real_issues_none_from_earlier_rounds_or_a_catalog_sample() -> None:
    check_fresh_set("explain_heldout6", 30)


# explain's answer differs from the label written before the run, and the difference is recorded
# (benchmarks/results/explain_heldout6.md) instead of tuning a rule to the label: held to the answer
# measured, so a change to it is seen
_JUDGED_OTHERWISE = {
    # 270 MiB reserved but unallocated next to a 20 MiB request: the fragmentation rule's own case
    "oom_torch15_no_space_after_colon_backticks": "oom-fragmentation",
    # labelled with the then-missing id `deepspeed-cuda-home-missing`; round seven added that cause as
    # the general `cuda-toolkit-missing-for-jit` (DeepSpeed and torch.utils.cpp_extension JIT builds)
    "deepspeed_missing_cuda_home_wsl": "cuda-toolkit-missing-for-jit",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_heldout6_case_gets_its_root_cause_or_an_honest_unknown(name: str) -> None:
    if name in _JUDGED_OTHERWISE:
        first, ids = top_cause((HELDOUT6 / "logs" / f"{name}.log").read_text(encoding="utf-8"))
        assert first == _JUDGED_OTHERWISE[name], ids
        return
    check_heldout_case(HELDOUT6, name, CASES[name])


# --- the fixes, on forms outside the held-out set -------------------------------------------------

_IPYTHON_LISTING = (
    "---------------------------------------------------------------------------\n"
    "RuntimeError                              Traceback (most recent call last)\n"
    "Cell In[2], line 1\n"
    "----> 1 x = torch.ones(3, device='cuda')\n"
    "\n"
    "File /opt/conda/lib/python3.11/site-packages/torch/cuda/__init__.py:284, in _lazy_init()\n"
    "    280 if is_in_bad_fork():\n"
    "    281     raise RuntimeError(\n"
    "    282         \"Cannot re-initialize CUDA in forked subprocess. To use CUDA with \"\n"
    "    283         \"multiprocessing, you must use the 'spawn' start method\")\n"
    "--> 284 torch._C._cuda_init()\n"
    "\n"
)


def test_a_message_quoted_in_a_notebook_source_listing_is_not_evidence() -> None:
    text = _IPYTHON_LISTING + "RuntimeError: No CUDA GPUs are available\n"
    _, ids = top_cause(text)
    assert "cuda-reinit-forked-subprocess" not in ids, ids


def test_the_same_error_raised_in_a_notebook_is_still_recognised() -> None:
    text = _IPYTHON_LISTING + ("RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with "
                               "multiprocessing, you must use the 'spawn' start method\n")
    first, ids = top_cause(text)
    assert first == "cuda-reinit-forked-subprocess", ids


def test_a_message_quoted_in_a_rich_box_source_listing_is_not_evidence() -> None:
    text = ("╭──────────────────── Traceback (most recent call last) ─────────────────────╮\n"
            "│ /app/train.py:88 in worker                                                 │\n"
            "│                                                                            │\n"
            "│    87 │   # first: no 'Cannot re-initialize CUDA in forked subprocess' here      │\n"
            "│ ❱  88 │   torch.cuda.set_device(rank)                                          │\n"
            "╰────────────────────────────────────────────────────────────────────────────╯\n"
            "ValueError: rank 3 is not in [0, 2)\n")
    _, ids = top_cause(text)
    assert "cuda-reinit-forked-subprocess" not in ids, ids


def test_numbered_lines_outside_a_notebook_or_rich_traceback_are_kept() -> None:
    # srun -l / a line counter: the number is a prefix, the rest is what the program printed
    first, ids = top_cause("12 RuntimeError: Cannot re-initialize CUDA in forked subprocess.\n")
    assert first == "cuda-reinit-forked-subprocess", ids


@pytest.mark.parametrize("text", [
    # torch 2.8+: the same cudaErrorUnknown under the new exception name, with the async hint after it
    "torch.AcceleratorError: CUDA error: unknown error\nCUDA kernel errors might be asynchronously reported "
    "at some other API call, so the stacktrace below might be incorrect.\n",
    # THC's wordings (torch <= 1.x, Linux paths)
    "THCudaCheck FAIL file=/pytorch/aten/src/THC/THCGeneral.cpp line=51 error=30 : unknown error\n",
    "RuntimeError: cuda runtime error (30) : unknown error at /pytorch/aten/src/THC/THCGeneral.cpp:50\n",
])
def test_cuda_unknown_error_wordings_are_a_failed_cuda_initialisation(text: str) -> None:
    first, ids = top_cause(text)
    assert first == "cuda-init-unknown-error", ids


def test_rocm_unknown_error_is_not_claimed_by_the_cuda_entry() -> None:
    _, ids = top_cause("RuntimeError: HIP error: unknown error\n")
    assert "cuda-init-unknown-error" not in ids, ids


@pytest.mark.parametrize("text", [
    "lightning_fabric.utilities.exceptions.MisconfigurationException: `CUDAAccelerator` can not run on your "
    "system since the accelerator is not available. The following accelerator(s) is available and can be "
    "passed into `accelerator` argument of `Trainer`: ['cpu'].\n",
    "pytorch_lightning.utilities.exceptions.MisconfigurationException: GPUAccelerator can not run on your "
    "system since the accelerator is not available. The following accelerator(s) is available and can be "
    "passed into `accelerator` argument of `Trainer`: ['cpu'].\n",
    "MisconfigurationException: You requested gpu: [0]\nBut your machine only has: []\n",
])
def test_lightning_saying_no_gpu_is_visible_is_cuda_not_available(text: str) -> None:
    first, ids = top_cause(text)
    assert first == "cuda-not-available", ids


@pytest.mark.parametrize("text", [
    # Apple's accelerator, not CUDA
    "MisconfigurationException: `MPSAccelerator` can not run on your system since the accelerator is not "
    "available. The following accelerator(s) is available and can be passed into `accelerator` argument of "
    "`Trainer`: ['cpu', 'cuda'].\n",
    # a GPU is visible; more were asked for than the process can see
    "MisconfigurationException: You requested gpu: [0, 1, 2, 3]\n But your machine only has: [0]\n",
])
def test_other_lightning_device_errors_are_not_cuda_not_available(text: str) -> None:
    _, ids = top_cause(text)
    assert "cuda-not-available" not in ids, ids
