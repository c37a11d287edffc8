"""The third held-out set (tests/fixtures/explain_heldout3, judged by
``benchmarks/explain_heldout.py --set explain_heldout3``) and the general fixes it led to.

The fixes are tested on message forms other than the held-out logs (other NCCL versions' wording,
the torch source's own FSDP message, lines that must not be claimed), so they are not fitted to one
issue's wording.
"""

from __future__ import annotations

import pytest


from .conftest import EXPLAIN_FIXTURES, check_fresh_set, check_heldout_case, heldout_cases, top_cause

HELDOUT3 = EXPLAIN_FIXTURES.parent / "explain_heldout3"
CASES = heldout_cases("explain_heldout3")


def test_the_set_is_30_real_issues_none_from_earlier_rounds_or_a_catalog_sample() -> None:
    check_fresh_set("explain_heldout3", 30)


@pytest.mark.parametrize("name", sorted(CASES))
def test_heldout3_case_gets_its_root_cause_or_an_honest_unknown(name: str) -> None:
    check_heldout_case(HELDOUT3, name, CASES[name])


# --- the fixes, on forms outside the held-out set -------------------------------------------------


def test_a_peer_closing_its_socket_is_the_remote_error_when_nccl_calls_it_internal() -> None:
    # newer NCCL's wording, quoted after 'Last error:' without the 'NCCL WARN' prefix
    text = ("torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
            "NCCLUtils.hpp:317, internal error - please report this issue to the NCCL developers, NCCL "
            "version 2.21.5\nLast error:\nsocketProgress: Connection closed by remote peer node-3<50522>\n")
    first, ids = top_cause(text)
    assert first == "nccl-remote-error", ids
    assert "nccl-internal-error" not in ids, ids


def test_the_old_nccl_closed_socket_form_is_seen_next_to_a_system_error_without_hiding_it() -> None:
    # older NCCL returns the closed socket as a system error; both are reported, the system error
    # (a root cause when it is real) is not overridden by a peer's disconnect
    text = ("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1191, "
            "unhandled system error, NCCL version 2.10.3\nncclSystemError: System call (e.g. socket, "
            "malloc) or external library call failed or device error. It can be also caused by "
            "unexpected exit of a remote peer.\nLast error:\nNet : Connection closed by remote peer "
            "10.0.0.7<44310>\n")
    _, ids = top_cause(text)
    assert {"nccl-system-error", "nccl-remote-error"} <= set(ids), ids


def test_a_system_error_on_one_rank_stays_the_answer_when_its_peers_report_remote_errors() -> None:
    text = ("[rank2]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
            "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
            "[rank2]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed "
            "or device error.\n"
            "[rank0]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote "
            "process exited or there was a network error, NCCL version 2.21.5\n"
            "[rank0]: Last error:\n[rank0]: socketProgress: Connection closed by remote peer node-1<41000>\n")
    first, ids = top_cause(text)
    assert first == "nccl-system-error", ids


def test_a_rank_that_ran_out_of_memory_outranks_its_peers_nccl_internal_error() -> None:
    text = ("[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a "
            "total capacity of 79.10 GiB of which 1.06 GiB is free.\n"
            "[rank0]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1333, internal "
            "error - please report this issue to the NCCL developers, NCCL version 2.18.1\n")
    first, ids = top_cause(text)
    assert first == "oom-caching-allocator", ids
    assert "nccl-internal-error" in ids, ids


@pytest.mark.parametrize("text", [
    # torch 1.x watchdog form (std::runtime_error), NCCL 2.18.3
    "terminate called after throwing an instance of 'std::runtime_error'\n  what():  NCCL error: internal "
    "error - please report this issue to the NCCL developers, NCCL version 2.18.3\n",
    # nccl-tests
    "dell03: Test NCCL failure common.cu:1012 'internal error - please report this issue to the NCCL "
    "developers / '\n",
    "ncclInternalError: Internal check failed.\nLast error:\nProxy Call to rank 3 failed (Connect)\n",
])
def test_an_nccl_internal_error_in_other_wordings_is_recognised(text: str) -> None:
    first, ids = top_cause(text)
    assert first == "nccl-internal-error", ids


@pytest.mark.parametrize("line", [
    "RuntimeError: CUDA driver error: internal error",
    "RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR",
    "torch._dynamo.exc.InternalTorchDynamoError: internal error while tracing the frame",
])
def test_an_internal_error_outside_nccl_is_not_claimed_as_nccl(line: str) -> None:
    _, ids = top_cause(line + "\n")
    assert "nccl-internal-error" not in ids, ids


@pytest.mark.parametrize("line", [
    # the torch source's wording, backticks and all (torch/distributed/fsdp/_flat_param.py)
    "ValueError: Must flatten tensors with uniform `requires_grad` when `use_orig_params=False`",
    "[rank1]: ValueError: Must flatten tensors with uniform dtype but got torch.float16 and torch.float32",
    "ValueError: FlatParameter requires uniform dtype but got torch.float16 and torch.bfloat16",
])
def test_fsdp_flat_parameter_uniformity_errors_are_recognised(line: str) -> None:
    first, ids = top_cause(line + "\n")
    assert first == "fsdp-flat-param-uniform", ids


def test_fsdp_flattening_on_two_devices_is_not_the_uniformity_entry() -> None:
    # another check in the same function: parameters on cpu and cuda (a different mistake)
    _, ids = top_cause("ValueError: Must flatten tensors on the same device but got both cpu and cuda:0\n")
    assert "fsdp-flat-param-uniform" not in ids, ids
