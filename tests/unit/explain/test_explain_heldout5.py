"""The fifth held-out set (tests/fixtures/explain_heldout5, judged by
``benchmarks/explain_heldout.py --set explain_heldout5``) and the general fixes it led to.

The fixes are tested on message forms other than the held-out logs (other torch versions' wording,
other ops and directions, other backends' errors), so they are not fitted to one issue's wording.
"""

from __future__ import annotations

import pytest

from gpudoctor.explain.facts import parse_oom

from .conftest import EXPLAIN_FIXTURES, check_fresh_set, check_heldout_case, heldout_cases, top_cause

HELDOUT5 = EXPLAIN_FIXTURES.parent / "explain_heldout5"
CASES = heldout_cases("explain_heldout5")


def test_the_set_is_30_real_issues_none_from_earlier_rounds_or_a_catalog_sample() -> None:
    check_fresh_set("explain_heldout5", 30)


# explain's answer differs from the label written before the run, and the difference is recorded
# (benchmarks/results/explain_heldout5.md) instead of tuning a rule to the label: held to the answer
# measured, so a change to it is seen
_JUDGED_OTHERWISE = {
    # 765.81 MiB reserved but unallocated next to a 132 MiB request: the fragmentation rule's own case
    "oom_rank3_timestamped_filelock_debug_after": "oom-fragmentation",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_heldout5_case_gets_its_root_cause_or_an_honest_unknown(name: str) -> None:
    if name in _JUDGED_OTHERWISE:
        first, ids = top_cause((HELDOUT5 / "logs" / f"{name}.log").read_text(encoding="utf-8"))
        assert first == _JUDGED_OTHERWISE[name], ids
        return
    check_heldout_case(HELDOUT5, name, CASES[name])


# --- the fixes, on forms outside the held-out set -------------------------------------------------


@pytest.mark.parametrize("text", [
    # ROCm's OOM in torch 2.x words, by itself and as a torch 1.x-style RuntimeError
    "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "23.98 GiB of which 1.02 GiB is free. Of the allocated memory 21.10 GiB is allocated by PyTorch, and "
    "402.11 MiB is reserved by PyTorch but unallocated.\n",
    "RuntimeError: HIP out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.98 GiB total capacity; "
    "7.61 GiB already allocated; 0 bytes free; 7.80 GiB reserved in total by PyTorch)\n",
    # the same message wrapped over two lines by a browser
    "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total\n"
    "capacity of 15.98 GiB of which 0 bytes is free.\n",
])
def test_rocm_out_of_memory_is_not_claimed_by_cuda_entries(text: str) -> None:
    first, ids = top_cause(text)
    assert first is None, ids


def test_a_cuda_oom_next_to_a_rocm_word_elsewhere_in_the_log_is_still_an_oom() -> None:
    text = ("ROCM used to build PyTorch: N/A\n" + "training step 10\n" * 3 +
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
            "of 23.65 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 22.50 GiB "
            "memory in use. Of the allocated memory 21.90 GiB is allocated by PyTorch, and 100.00 MiB is "
            "reserved by PyTorch but unallocated.\n")
    first, ids = top_cause(text)
    assert first == "oom-caching-allocator", ids


def test_the_torch1_0_cached_wording_reads_cached_as_the_unallocated_cache() -> None:
    # c10/cuda/CUDACachingAllocator.cpp (1.0-1.3): amount_cached - amount_allocated, " cached)"
    facts = parse_oom("CUDA out of memory. Tried to allocate 2.00 MiB (GPU 0; 10.73 GiB total capacity; "
                      "9.50 GiB already allocated; 1.94 MiB free; 300.00 MiB cached)")
    assert facts is not None
    assert facts.reserved_unallocated == 300 * 2**20
    assert facts.allocated == int(9.5 * 2**30)


def test_a_torch1_0_oom_with_gib_held_outside_is_a_shared_gpu() -> None:
    # 11.17 GiB card: 2.1 GiB this process's (allocated + cached), 20 MiB free, ~9 GiB someone else's
    text = ("RuntimeError: CUDA out of memory. Tried to allocate 50.00 MiB (GPU 1; 11.17 GiB total capacity; "
            "2.00 GiB already allocated; 20.25 MiB free; 102.40 MiB cached)\n")
    first, ids = top_cause(text)
    assert first == "oom-shared-gpu", ids


def test_a_torch1_0_oom_that_fills_the_card_itself_stays_a_plain_oom() -> None:
    text = ("RuntimeError: CUDA out of memory. Tried to allocate 44.00 MiB (GPU 0; 10.91 GiB total capacity; "
            "9.96 GiB already allocated; 13.38 MiB free; 328.66 MiB cached)\n")
    first, ids = top_cause(text)
    assert first in {"oom-caching-allocator", "oom-fragmentation"}, ids
    assert "oom-shared-gpu" not in ids, ids


def test_the_torch1_0_cached_wording_can_show_fragmentation() -> None:
    text = ("RuntimeError: CUDA out of memory. Tried to allocate 1.50 GiB (GPU 0; 15.90 GiB total capacity; "
            "12.10 GiB already allocated; 400.00 MiB free; 3.10 GiB cached)\n")
    first, ids = top_cause(text)
    assert first == "oom-fragmentation", ids


def test_thc_error_2_is_an_out_of_memory_before_the_crash_it_causes() -> None:
    text = ("THCudaCheck FAIL file=/pytorch/aten/src/THC/THCCachingHostAllocator.cpp line=265 error=2 : "
            "out of memory\nSegmentation fault (core dumped)\n")
    first, ids = top_cause(text)
    assert first == "cuda-error-out-of-memory", ids


def test_a_thc_check_of_another_error_is_not_an_oom() -> None:
    _, ids = top_cause("THCudaCheck FAIL file=/pytorch/aten/src/THC/THCGeneral.cpp line=51 error=30 : "
                       "unknown error\n")
    assert "cuda-error-out-of-memory" not in ids, ids


@pytest.mark.parametrize("line", [
    "RuntimeError: Expected object of backend CPU but got backend CUDA for argument #3 'index'",
    "RuntimeError: Expected object of device type cuda but got device type cpu for argument #1 'self' in "
    "call to _th_index_select",
    "RuntimeError: Expected object of device type cpu but got device type cuda for argument #2 'mat2' in "
    "call to _th_mm",
])
def test_torch1_device_mismatch_wordings_are_tensors_on_different_devices(line: str) -> None:
    first, ids = top_cause(line + "\n")
    assert first == "tensors-on-different-devices", ids


@pytest.mark.parametrize("line", [
    "RuntimeError: Expected object of scalar type Double but got scalar type Float for argument #2 'mat2' "
    "in call to _th_mm",
    "RuntimeError: Expected object of scalar type Half but got scalar type Float for argument #2 'weight'",
])
def test_torch1_float_dtype_mismatch_wordings_are_dtype_mismatch(line: str) -> None:
    first, ids = top_cause(line + "\n")
    assert first == "dtype-mismatch", ids


def test_a_torch1_long_vs_float_target_is_not_the_float_dtype_entry() -> None:
    _, ids = top_cause("RuntimeError: Expected object of scalar type Long but got scalar type Float for "
                       "argument #2 'target'\n")
    assert "dtype-mismatch" not in ids, ids


@pytest.mark.parametrize("line", [
    "NotImplementedError: Could not run 'torchvision::roi_align' with arguments from the 'CUDA' backend. "
    "'torchvision::roi_align' is only available for these backends: [CPU, BackendSelect].",
    "RuntimeError: Could not run 'torchaudio::rnnt_loss' with arguments from the 'CUDA' backend.",
])
def test_an_extension_op_without_a_cuda_kernel_is_an_extension_built_for_another_torch(line: str) -> None:
    first, ids = top_cause(line + "\n")
    assert first == "extension-built-for-other-torch", ids


def test_a_torch_aten_op_without_a_cuda_kernel_is_not_an_extension_mismatch() -> None:
    _, ids = top_cause("NotImplementedError: Could not run 'aten::empty_strided' with arguments from the "
                       "'CUDA' backend.\n")
    assert "extension-built-for-other-torch" not in ids, ids


@pytest.mark.parametrize("text", [
    "RuntimeError: unexpected EOF, expected 1235 more bytes. The file might be corrupted.\n",
    "_pickle.UnpicklingError: invalid load key, '<'.\n",
    "  File \"/x/torch/serialization.py\", line 1025, in load\n"
    "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory\n",
])
def test_a_truncated_or_foreign_checkpoint_file_is_recognised(text: str) -> None:
    first, ids = top_cause(text)
    assert first == "checkpoint-file-corrupt", ids
