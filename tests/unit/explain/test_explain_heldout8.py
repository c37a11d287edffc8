"""The eighth held-out set (tests/fixtures/explain_heldout8, judged by
``benchmarks/explain_heldout.py --set explain_heldout8``): 2025-2026 training failures sampled the way a
user meets them (one issue search per popular training repository, results taken in rank order), and
the general fixes it led to.

The fixes are tested on message forms other than the held-out logs (other torch, bitsandbytes and
xformers versions' wording, other kernels), so they are not fitted to one issue's wording.
"""

from __future__ import annotations

import pytest

from .conftest import EXPLAIN_FIXTURES, check_fresh_set, check_heldout_case, heldout_cases, top_cause

HELDOUT8 = EXPLAIN_FIXTURES.parent / "explain_heldout8"
CASES = heldout_cases("explain_heldout8")


def test_the_set_is_26_real_issues_none_from_earlier_rounds_or_a_catalog_sample() -> None:
    check_fresh_set("explain_heldout8", 26)


@pytest.mark.parametrize("name", sorted(CASES))
def test_heldout8_case_gets_its_root_cause_or_an_honest_unknown(name: str) -> None:
    check_heldout_case(HELDOUT8, name, CASES[name])


# --- the fixes, on forms outside the held-out set -------------------------------------------------

@pytest.mark.parametrize("text", [
    # advanced indexing out of range (aten/src/ATen/native/cuda/IndexKernel.cu), a condition the
    # index-assert list did not name
    "/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [0,0,0], thread: [0,0,0] "
    "Assertion `-sizes[i] <= index && index < sizes[i] && \"index out of bounds\"` failed.\n",
    # torch 1.x multinomial on negative/NaN probabilities (MultinomialKernel.cu), with a conda build path
    "/opt/conda/conda-bld/pytorch_1614378083779/work/aten/src/ATen/native/cuda/MultinomialKernel.cu:246: "
    "sampleMultinomialOnce: block: [0,0,0], thread: [0,0,0] Assertion `val >= zero` failed.\n",
])
def test_any_cuda_kernel_assert_line_is_a_device_side_assert(text: str) -> None:
    first, ids = top_cause(text)
    assert first == "device-side-assert", ids


def test_a_host_c_assert_is_not_a_device_side_assert() -> None:
    # glibc's assert() from a CPU extension: no block/thread coordinates, not a CUDA kernel
    first, ids = top_cause("python: src/decoder.c:88: decode_frame: Assertion `n > 0' failed.\nAborted (core dumped)\n")
    assert "device-side-assert" not in ids, ids


@pytest.mark.parametrize("text", [
    # bitsandbytes 0.41-0.43 with only the CPU library: the handle is None at the first 32-bit step
    "'NoneType' object has no attribute 'cadam32bit_grad_fp32'\n",
    # bitsandbytes 0.43 (bitsandbytes-foundation/bitsandbytes#1189's title): the 32-bit table
    "NameError: name 'str2optimizer32bit' is not defined\n",
    # the older import-time warning (no '8-bit multiplication'), as UserWarning with its path
    "/opt/conda/lib/python3.8/site-packages/bitsandbytes/cextension.py:33: UserWarning: The installed "
    "version of bitsandbytes was compiled without GPU support. 8-bit optimizers and GPU quantization are "
    "unavailable.\n",
])
def test_bitsandbytes_without_its_cuda_library_in_other_wordings(text: str) -> None:
    first, ids = top_cause(text)
    assert first == "bitsandbytes-native-library", ids


def test_a_plain_name_error_is_not_bitsandbytes() -> None:
    first, ids = top_cause("NameError: name 'optimizer' is not defined\n")
    assert "bitsandbytes-native-library" not in ids, ids


def test_xformers_kernels_too_new_for_the_gpu_is_no_kernel_image() -> None:
    # another xformers build (flash-attn 2.5.7 inside), the backward op, an RTX 5080
    text = ("NotImplementedError: No operator found for `memory_efficient_attention_backward` with inputs:\n"
            "`fa2B@v2.5.7-pt` is not supported because:\n"
            "    requires device with capability <= (9, 0) but your GPU has capability (12, 0) (too new)\n")
    first, ids = top_cause(text)
    assert first == "no-kernel-image", ids


def test_xformers_gpu_too_old_is_not_claimed_as_no_kernel_image() -> None:
    # a T4 (7, 5) below flash-attn's minimum: the library is fine, the GPU is below the kernel's
    # minimum; no entry names that yet, so no guess
    text = ("`fa2B@2.5.7-pt` is not supported because:\n"
            "    requires device with capability >= (8, 0) but your GPU has capability (7, 5) (too old)\n")
    first, ids = top_cause(text)
    assert "no-kernel-image" not in ids, ids


@pytest.mark.parametrize("text", [
    # Colab's older IPython: '<ipython-input-N-...>' instead of a temp file
    "---------------------------------------------------------------------------\n"
    "OutOfMemoryError                          Traceback (most recent call last)\n"
    "<ipython-input-7-3d62c575fcfd> in <cell line: 1>()\n"
    "----> 1 trainer_stats = trainer.train()\n",
    # the header alone, indented as copied from a notebook cell output
    "  OutOfMemoryError    Traceback (most recent call last)\n",
])
def test_an_ipython_out_of_memory_header_is_a_cuda_oom(text: str) -> None:
    first, ids = top_cause(text)
    assert first == "oom-caching-allocator", ids


def test_a_host_memory_error_header_is_not_a_gpu_oom() -> None:
    first, ids = top_cause("MemoryError                               Traceback (most recent call last)\n")
    assert "oom-caching-allocator" not in ids, ids


# --- the new entry: a GPU hardware fault ------------------------------------------------------------

@pytest.mark.parametrize("text", [
    # torch 1.x numbered wording (NVIDIA/semantic-segmentation#33), from the pinned-memory allocator
    "RuntimeError: cuda runtime error (39) : uncorrectable ECC error encountered at "
    "/pytorch/aten/src/THC/THCCachingHostAllocator.cpp:265\n",
    # TensorFlow's driver-API name (nagadit/DeepFaceLab_Linux#89)
    "failed call to cuDevicePrimaryCtxRetain: CUDA_ERROR_ECC_UNCORRECTABLE: uncorrectable ECC error encountered\n",
    # torch 2.8's AcceleratorError with the runtime's error name (ostris/ai-toolkit#470)
    "torch.AcceleratorError: CUDA error: uncorrectable ECC error encountered\n"
    "Search for `cudaErrorECCUncorrectable' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html "
    "for more information.\n",
])
def test_an_uncorrectable_ecc_error_is_a_hardware_fault(text: str) -> None:
    first, ids = top_cause(text)
    assert first == "gpu-hardware-fault", ids


def test_the_hardware_fault_is_the_root_when_the_nccl_watchdog_reports_it() -> None:
    # kohya-ss/sd-scripts#1434: the failing rank's error, then the watchdog rethrowing it
    text = ("RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
            "[E ProcessGroupNCCL.cpp:916] [Rank 1] NCCL watchdog thread terminated with exception: CUDA error: "
            "uncorrectable ECC error encountered\n")
    first, ids = top_cause(text)
    assert first == "gpu-hardware-fault", ids


def test_a_correctable_ecc_count_is_not_a_fault() -> None:
    # nvidia-smi -q output with corrected (single-bit) errors only: nothing failed
    first, ids = top_cause("        ECC Errors\n            Volatile\n                SRAM Correctable    : 3\n"
                           "                SRAM Uncorrectable  : 0\n")
    assert "gpu-hardware-fault" not in ids, ids
