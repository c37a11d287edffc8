"""The fourth held-out set (tests/fixtures/explain_heldout4, judged by
``benchmarks/explain_heldout.py --set explain_heldout4``) and the general fixes it led to.

The fixes are tested on message forms other than the held-out logs (other torch versions' OOM
wording, other bitsandbytes / flash-attn / xformers lines, other backends' errors), so they are not
fitted to one issue's wording.
"""

from __future__ import annotations

import pytest


from .conftest import EXPLAIN_FIXTURES, check_fresh_set, check_heldout_case, heldout_cases, top_cause

HELDOUT4 = EXPLAIN_FIXTURES.parent / "explain_heldout4"
CASES = heldout_cases("explain_heldout4")


def test_the_set_is_30_real_issues_none_from_earlier_rounds_or_a_catalog_sample() -> None:
    check_fresh_set("explain_heldout4", 30)


# explain's answer differs from the label written before the run, and the difference is recorded
# (benchmarks/results/explain_heldout4.md) instead of tuning a rule to the label: these cases are
# held to the answer measured, so a change to it is seen
_JUDGED_OTHERWISE = {
    # 0.99 GiB reserved-but-unallocated >= the 672 MiB request: the fragmentation rule's own case
    "oom_after_warnings_detectron2_torch1x": "oom-fragmentation",
    # four sibling ranks' 414 MiB contexts on GPU 0 would have made room for the 572 MiB request
    "oom_rank0_lora_cat_other_ranks_contexts": "oom-shared-gpu",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_heldout4_case_gets_its_root_cause_or_an_honest_unknown(name: str) -> None:
    if name in _JUDGED_OTHERWISE:
        first, ids = top_cause((HELDOUT4 / "logs" / f"{name}.log").read_text(encoding="utf-8"))
        assert first == _JUDGED_OTHERWISE[name], ids
        return
    check_heldout_case(HELDOUT4, name, CASES[name])


# --- the fixes, on forms outside the held-out set -------------------------------------------------


@pytest.mark.parametrize("text", [
    # Apple MPS, another wording (shared pool, no 'other allocations')
    "MPS backend out of memory (MPS allocated: 1024.00 MB). Tried to allocate 256 bytes on shared pool.\n",
    "RuntimeError: MPS backend out of memory (MPS allocated: 8.93 GB, other allocations: 120.39 MB, max "
    "allowed: 9.07 GB). Tried to allocate 25.00 MB on private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 "
    "to disable upper limit for memory allocations (may cause system failure).\n",
    # ROCm
    "RuntimeError: HIP error: invalid device function\nHIP kernel errors might be asynchronously reported at "
    "some other API call, so the stacktrace below might be incorrect.\n",
])
def test_other_backends_errors_are_not_claimed_by_cuda_entries(text: str) -> None:
    first, ids = top_cause(text)
    assert first is None, ids


@pytest.mark.parametrize("line", [
    # torch 1.0 wording ('cached'), head cut off
    "Tried to allocate 12.50 MiB (GPU 0; 10.92 GiB total capacity; 8.57 MiB already allocated; "
    "9.28 GiB free; 4.68 MiB cached)",
    # torch 1.x 'reserved' wording, head cut off, on a larger card
    "Tried to allocate 512.00 MiB (GPU 1; 31.75 GiB total capacity; 30.10 GiB already allocated; "
    "120.00 MiB free; 30.40 GiB reserved in total by PyTorch)",
])
def test_a_torch1_oom_size_clause_without_its_head_is_an_oom(line: str) -> None:
    first, ids = top_cause(line + "\n")
    assert first == "oom-caching-allocator", ids


def test_a_size_clause_without_total_capacity_is_not_claimed_as_oom() -> None:
    _, ids = top_cause("Tried to allocate 2 bytes on shared pool (GPU 0)\n")
    assert "oom-caching-allocator" not in ids, ids


def test_memory_held_outside_this_process_shows_a_shared_gpu_in_torch1_wording() -> None:
    # 23.65 GiB card, PyTorch reserved 2 GiB, 0.5 GiB free: ~21 GiB held by someone else
    text = ("RuntimeError: CUDA out of memory. Tried to allocate 1.00 GiB (GPU 0; 23.65 GiB total capacity; "
            "1.80 GiB already allocated; 512.00 MiB free; 2.00 GiB reserved in total by PyTorch)\n")
    first, ids = top_cause(text)
    assert first == "oom-shared-gpu", ids


def test_memory_held_outside_this_process_shows_a_shared_gpu_in_torch2_wording() -> None:
    # no 'Process N has' lines (a container hides them), but this process has only 6.5 of 23.65 GiB
    text = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
            "of 23.65 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 6.50 GiB "
            "memory in use. Of the allocated memory 5.90 GiB is allocated by PyTorch, and 100.00 MiB is "
            "reserved by PyTorch but unallocated.\n")
    first, ids = top_cause(text)
    assert first == "oom-shared-gpu", ids


@pytest.mark.parametrize("text", [
    # this process holds the card (pytorch/pytorch#16417, a 2024 comment's wording)
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 has a total capacity "
    "of 23.65 GiB of which 11.06 MiB is free. Including non-PyTorch memory, this process has 23.60 GiB memory "
    "in use. Of the allocated memory 22.90 GiB is allocated by PyTorch, and 194.87 MiB is reserved by "
    "PyTorch but unallocated.\n",
    # a small card: context and display take ~0.7 GiB outside PyTorch, not another process
    "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 1.96 GiB total capacity; "
    "1.24 GiB already allocated; 2.88 MiB free; 1.25 GiB reserved in total by PyTorch)\n",
])
def test_a_process_that_fills_the_card_itself_is_not_a_shared_gpu(text: str) -> None:
    _, ids = top_cause(text)
    assert "oom-shared-gpu" not in ids, ids


def test_a_failed_device_count_query_is_cuda_initialisation_not_an_oom() -> None:
    text = ("UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run some "
            "cuda functions before calling NumCudaDevices() that might have already set an error? Error 500: "
            "named symbol not found (Triggered internally at ../c10/cuda/CUDAFunctions.cpp:108.)\n")
    first, ids = top_cause(text)
    assert first == "cuda-init-unknown-error", ids
    _, ids = top_cause(text.replace("Error 500: named symbol not found", "Error 2: out of memory"))
    assert not any(i.startswith("oom") for i in ids), ids


@pytest.mark.parametrize("text", [
    'Missing key(s) in state_dict: "_orig_mod.conv1.weight", "_orig_mod.bn1.weight".\n',
    "RuntimeError: Error(s) in loading state_dict for OptimizedModule:\n",
])
def test_a_compiled_models_orig_mod_keys_are_the_wrapper_prefix(text: str) -> None:
    first, ids = top_cause(text)
    assert first == "state-dict-module-prefix", ids


@pytest.mark.parametrize("text", [
    "CUDA SETUP: Required library version not found: libbitsandbytes_cuda118.so. Maybe you need to compile "
    "it from source?\nCUDA SETUP: Defaulting to libbitsandbytes_cpu.so...\n",
    # the newer wording, with bitsandbytes' hint naming libcudart (not the failing library)
    "If you use the manual override make sure the right libcudart.so is in your LD_LIBRARY_PATH\n"
    "CUDA Setup failed despite CUDA being available. Please run the following command to get more information:\n",
])
def test_bitsandbytes_failing_to_load_its_library_is_its_own_entry(text: str) -> None:
    first, ids = top_cause(text)
    assert first == "bitsandbytes-native-library", ids


def test_an_unrelated_shared_object_is_not_a_missing_cuda_library() -> None:
    _, ids = top_cause("OSError: /opt/ext/libmy_op.so: cannot open shared object file: No such file or directory\n")
    assert "cuda-library-not-found" not in ids, ids


@pytest.mark.parametrize("line", [
    "/usr/lib/python3/site-packages/flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so: undefined symbol: "
    "_ZN2at4_ops5zeros4callEN3c108ArrayRefINS2_6SymIntEEE",
    "ImportError: /x/apex/amp_C.cpython-310-x86_64-linux-gnu.so: undefined symbol: _ZN5torch3jit17parseSchemaERKSs",
    "WARNING:xformers:WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers was built for:",
])
def test_an_extension_built_for_another_torch_is_recognised(line: str) -> None:
    first, ids = top_cause(line + "\n")
    assert first == "extension-built-for-other-torch", ids


def test_an_undefined_symbol_outside_torch_is_not_an_extension_mismatch() -> None:
    _, ids = top_cause("ImportError: /x/libtorch_cuda.so: undefined symbol: ncclCommRegister\n")
    assert "extension-built-for-other-torch" not in ids, ids


def test_gradscaler_without_any_gradient_is_recognised() -> None:
    text = ('    assert len(optimizer_state["found_inf_per_device"]) > 0, "No inf checks were recorded for this '
            'optimizer."\nAssertionError: No inf checks were recorded for this optimizer.\n')
    first, ids = top_cause(text)
    assert first == "gradscaler-no-inf-checks", ids
