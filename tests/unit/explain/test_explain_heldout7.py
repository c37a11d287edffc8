"""The seventh held-out set (tests/fixtures/explain_heldout7, judged by
``benchmarks/explain_heldout.py --set explain_heldout7``) and the general fixes it led to.

The fixes are tested on message forms other than the held-out logs (other torch/triton/DeepSpeed
versions' wording, other call sites), so they are not fitted to one issue's wording.
"""

from __future__ import annotations

import pytest

from .conftest import EXPLAIN_FIXTURES, check_fresh_set, check_heldout_case, heldout_cases, top_cause

HELDOUT7 = EXPLAIN_FIXTURES.parent / "explain_heldout7"
CASES = heldout_cases("explain_heldout7")


def test_the_set_is_30_real_issues_none_from_earlier_rounds_or_a_catalog_sample() -> None:
    check_fresh_set("explain_heldout7", 30)


@pytest.mark.parametrize("name", sorted(CASES))
def test_heldout7_case_gets_its_root_cause_or_an_honest_unknown(name: str) -> None:
    check_heldout_case(HELDOUT7, name, CASES[name])


# --- the fixes, on forms outside the held-out set -------------------------------------------------

@pytest.mark.parametrize("text", [
    # torch 2.4 (xdit-project/xDiT#147): another process group, a shorter queue
    "[rank4]:[E ProcessGroupNCCL.cpp:1316] [PG 5 Rank 0] Heartbeat monitor timed out! Process will be "
    "terminated after dumping debug info. workMetaList_.size()=2\n",
    # torch 2.5 with timestamps (sgl-project/sglang#1691): the fatal line alone
    "[rank2]:[F1019 01:14:03.356851194 ProcessGroupNCCL.cpp:1224] [PG 3 Rank 2] [PG 3 Rank 2] "
    "ProcessGroupNCCL's watchdog got stuck for 600 seconds without making progress in monitoring enqueued "
    "collectives. This typically indicates a NCCL/CUDA API hang blocking the watchdog\n",
])
def test_the_nccl_heartbeat_monitor_is_a_hung_collective(text: str) -> None:
    first, ids = top_cause(text)
    assert first == "nccl-watchdog-timeout", ids


def test_the_heartbeat_settings_printed_in_a_config_are_not_a_hang() -> None:
    _, ids = top_cause("env: TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC=1200 TORCH_NCCL_ENABLE_MONITORING=1\n")
    assert "nccl-watchdog-timeout" not in ids, ids


@pytest.mark.parametrize("text", [
    # nvidia-cosmos/cosmos-rl#681: a container hostname instead of an address, a 5-minute timeout
    "torch.distributed.DistNetworkError: The client socket has timed out after 300000ms while trying to "
    "connect to (036c56dce41b, 41331).\n",
    # torchelastic's exception named by its module path in an elastic error summary
    "    raise RendezvousTimeoutError()\ntorch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n",
])
def test_store_and_rendezvous_timeouts_are_an_unreachable_rendezvous(text: str) -> None:
    first, ids = top_cause(text)
    assert first == "rendezvous-unreachable", ids


@pytest.mark.parametrize("text", [
    # torch 2.1-2.3: NVML initialisation on the OOM path (pytorch/pytorch#112950, #130486 wordings)
    'RuntimeError: NVML_SUCCESS == DriverAPI::get()->nvmlDeviceGetHandleByPciBusId_v2_( pci_id, '
    '&nvml_device) INTERNAL ASSERT FAILED at "../c10/cuda/CUDACachingAllocator.cpp":815, please report a '
    'bug to PyTorch.\n',
    # torch 2.7 line number, printed by an application's own error handler (pytorch/pytorch#159149)
    '❌ Error generating speech: NVML_SUCCESS == r INTERNAL ASSERT FAILED at '
    '"../c10/cuda/CUDACachingAllocator.cpp":995, please report a bug to PyTorch.\n',
])
def test_the_allocators_nvml_assert_is_an_out_of_memory(text: str) -> None:
    first, ids = top_cause(text)
    assert first == "oom-nvml-assert", ids


def test_an_nvml_assert_outside_the_caching_allocator_is_not_claimed_as_an_oom() -> None:
    _, ids = top_cause('RuntimeError: NVML_SUCCESS == r INTERNAL ASSERT FAILED at '
                       '"../c10/cuda/CUDAFunctions.cpp":120, please report a bug to PyTorch.\n')
    assert "oom-nvml-assert" not in ids, ids


@pytest.mark.parametrize("text", [
    # triton 1.x/2.0 (triton-lang/triton#384): no separators between the clauses
    "triton.code_gen.OutOfResources: out of resource: shared memoryRequired: 110592Hardware limit: 101376\n",
    # triton 3 from a library kernel (OpenSpaceAI/DEST3D#2)
    "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 589824, Hardware limit: "
    "101376. Reducing block sizes or num_stages may help.\n",
])
def test_triton_shared_memory_out_of_resources(text: str) -> None:
    first, ids = top_cause(text)
    assert first == "triton-out-of-shared-memory", ids


def test_triton_shared_memory_is_not_a_gpu_out_of_memory() -> None:
    _, ids = top_cause("triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: "
                       "98304, Hardware limit: 65536.\n")
    assert not any(i.startswith("oom-") for i in ids), ids


@pytest.mark.parametrize("text", [
    # DeepSpeed before MissingCUDAException (enhuiz/vall-e#78)
    "AssertionError: CUDA_HOME does not exist, unable to compile CUDA op(s)\n",
    # torch.utils.cpp_extension building a CUDA extension from source
    "OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.\n",
])
def test_a_missing_cuda_toolkit_for_jit_builds(text: str) -> None:
    first, ids = top_cause(text)
    assert first == "cuda-toolkit-missing-for-jit", ids
