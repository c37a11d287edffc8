"""The tenth held-out set (tests/fixtures/explain_heldout10, judged by
``benchmarks/explain_heldout.py --set explain_heldout10``): GitHub issue threads of mid-popularity
training projects (kohya_ss, timm, detectron2, mmdetection, yolov5, LLaVA, FastChat, NeMo, litgpt,
InternVL), taken in rank order per query (cases.toml says which queries and what was skipped), and the
general fixes it led to.

The fixes are tested on message forms other than the held-out logs, so they are not fitted to one
thread's wording.
"""

from __future__ import annotations

import pytest

from .conftest import EXPLAIN_FIXTURES, check_fresh_set, check_heldout_case, heldout_cases, top_cause

HELDOUT10 = EXPLAIN_FIXTURES.parent / "explain_heldout10"
CASES = heldout_cases("explain_heldout10")


def test_the_set_is_27_issue_threads_none_from_earlier_rounds_or_a_catalog_sample() -> None:
    check_fresh_set("explain_heldout10", 27)


@pytest.mark.parametrize("name", sorted(CASES))
def test_heldout10_case_gets_its_root_cause_or_an_honest_unknown(name: str) -> None:
    check_heldout_case(HELDOUT10, name, CASES[name])


def _first(text: str) -> str | None:
    return top_cause(text)[0]


# --- error 803/804: the driver stack disagrees with itself at CUDA initialisation --------------------

@pytest.mark.parametrize("text", [
    # torch 2.x's device-count warning already matched; the error string alone, from other wrappers
    "E external/xla/xla/stream_executor/cuda/cuda_driver.cc:268] failed call to cuInit: "
    "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE: forward compatibility was attempted on non supported HW\n",
    "RuntimeError: CUDA error: forward compatibility was attempted on non supported HW\n",
    "cudaErrorCompatNotSupportedOnDevice\n",
    # 803, the same mismatch in another code
    "RuntimeError: cuda runtime error (803) : system has unsupported display driver / cuda driver combination at "
    "/pytorch/aten/src/THC/THCGeneral.cpp:47\n",
])
def test_a_driver_stack_mismatch_is_a_cuda_initialisation_failure(text: str) -> None:
    assert _first(text) == "cuda-init-unknown-error", top_cause(text)[1]


def test_forward_compatibility_of_a_model_format_is_not_a_driver_error() -> None:
    text = "UserWarning: forward compatibility of the checkpoint format is not guaranteed\n"
    assert "cuda-init-unknown-error" not in top_cause(text)[1]


# --- NCCL finds no network interface for its bootstrap ------------------------------------------------

@pytest.mark.parametrize("text", [
    "node-3:4412:4412 [0] bootstrap.cc:45 NCCL WARN Bootstrap : no socket interface found\n",
    "NCCL WARN NET/ND : no socket interface found for out-of-band connections\n",
])
def test_no_socket_interface_is_an_nccl_network_setup_error(text: str) -> None:
    assert _first(text) == "nccl-system-error", top_cause(text)[1]


def test_an_interface_that_was_found_is_not_an_error() -> None:
    text = "NCCL INFO Bootstrap : Using eth0:10.0.0.3<0>\nNCCL INFO NET/Socket : Using [0]eth0:10.0.0.3<0>\n"
    assert "nccl-system-error" not in top_cause(text)[1]


# --- a gradient reported non-finite in a shortened line -------------------------------------------

@pytest.mark.parametrize("text", [
    "step 120 | loss 7.41 | grad: nan\n",
    "{'loss': 2.31, 'grads': inf, 'learning_rate': 1e-05}\n",
])
def test_a_shortened_nonfinite_gradient_is_a_nonfinite_gradient_norm(text: str) -> None:
    assert _first(text) == "grad-norm-nonfinite", top_cause(text)[1]


@pytest.mark.parametrize("text", [
    "param.requires_grad = False\n",
    "with torch.no_grad(): val_loss = 0.0\n",
    "grad: 0.731\n",
])
def test_a_finite_gradient_or_grad_settings_are_not_claimed(text: str) -> None:
    assert "grad-norm-nonfinite" not in top_cause(text)[1]


# --- 'OOM' written as a word with a GPU named ---------------------------------------------------

@pytest.mark.parametrize("text", [
    "Getting OOM when fine-tuning llama-13b on 8x H100 with ZeRO-2\n",
    "RTX 3090 24GB: OOM at batch size 16\n",
    "OOM on my 24GB GPU during evaluation\n",
])
def test_oom_with_a_gpu_named_is_a_cuda_out_of_memory(text: str) -> None:
    assert _first(text) == "oom-caching-allocator", top_cause(text)[1]


@pytest.mark.parametrize("text", [
    "the host OOM killer ended the job on the A100 node\n",
    "[12345.6] Out of memory: Killed process 4242 (python) total-vm:80GB\n",
    "CPU OOM while tokenizing on a machine with 4 GPUs\n",
    "OOM at step 500\n",  # no GPU named: not enough to say it was the GPU's memory
    "zoom into the RTX 4090 room\n",
])
def test_host_ooms_and_oom_without_a_gpu_are_not_cuda_oom(text: str) -> None:
    from gpudoctor.explain import explain_text

    # at most the weak 'out of memory' keyword (the kernel's own line has it), never a pattern's confidence
    strong = [m for m in explain_text(text).matches if m.entry_id == "oom-caching-allocator" and m.confidence >= 0.9]
    assert not strong, top_cause(text)[1]
