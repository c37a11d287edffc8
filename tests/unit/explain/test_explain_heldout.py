"""The held-out real error reports (tests/fixtures/explain_heldout, judged by
benchmarks/explain_heldout.py) and the general matching fixes they led to.

Each log quotes the error lines of one public issue; ``cases.toml`` names the issue and the entry ids of
the right root cause (none: the right answer is that explain does not know). The fixes are tested here
on message forms other than the held-out ones (other versions, other wrappers), so they are not fitted to
one issue's wording.
"""

from __future__ import annotations

import tomllib

import pytest

from gpudoctor.explain import explain_text

from .conftest import EXPLAIN_FIXTURES, check_heldout_case, top_cause

HELDOUT = EXPLAIN_FIXTURES.parent / "explain_heldout"
CASES = tomllib.loads((HELDOUT / "cases.toml").read_text(encoding="utf-8"))


def test_the_set_is_40_real_issues_each_with_a_log() -> None:
    assert len(CASES) == 40
    for name, case in CASES.items():
        assert (HELDOUT / "logs" / f"{name}.log").is_file(), name
        assert case["source"].startswith("https://github.com/") and case["title"] and case["why"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_heldout_case_gets_its_root_cause_or_an_honest_unknown(name: str) -> None:
    check_heldout_case(HELDOUT, name, CASES[name])


# --- the fixes, on forms outside the held-out set -------------------------------------------------


def test_sibling_rank_contexts_that_could_not_have_made_room_do_not_hide_fragmentation() -> None:
    # 4 ranks on one node, 3 small sibling contexts on GPU 1, 3.1 GiB cached but unallocated
    text = ("[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. GPU 1 has a "
            "total capacity of 79.15 GiB of which 900.00 MiB is free. Process 11 has 520.00 MiB memory in "
            "use. Process 12 has 520.00 MiB memory in use. Including non-PyTorch memory, this process has "
            "77.20 GiB memory in use. Of the allocated memory 73.10 GiB is allocated by PyTorch, and "
            "3.10 GiB is reserved by PyTorch but unallocated.")
    first, _ = top_cause(text)
    assert first == "oom-fragmentation"
    # the same siblings holding enough that, freed, the request would have fitted: they are the cause
    first, _ = top_cause(text.replace("520.00 MiB", "2.00 GiB"))
    assert first == "oom-shared-gpu"


@pytest.mark.parametrize("line", [
    "RuntimeError: CUDA out of memory.",
    "torch.cuda.OutOfMemoryError: CUDA out of memory.",
])
def test_the_first_sentence_of_an_oom_alone_is_a_strong_match(line: str) -> None:
    report = explain_text(line)
    assert report.matches[0].entry_id == "oom-caching-allocator" and report.matches[0].confidence >= 0.9


@pytest.mark.parametrize("line, entry", [
    # transformers' Trainer prints its log dict: quoted keys
    ("{'loss': 1.2, 'grad_norm': nan, 'learning_rate': 2e-05, 'epoch': 0.1}", "grad-norm-nonfinite"),
    ("{'loss': nan, 'grad_norm': 3.1, 'learning_rate': 2e-05, 'epoch': 0.1}", "nan-loss"),
    ('{"train_loss": NaN, "step": 12}', "nan-loss"),
])
def test_quoted_metric_keys(line: str, entry: str) -> None:
    assert top_cause(line)[0] == entry


def test_the_nan_note_reads_quoted_losses() -> None:
    report = explain_text("{'loss': 2.31, 'epoch': 0.1}\n{'loss': 2.29, 'epoch': 0.2}\n{'loss': nan, 'epoch': 0.3}")
    match = next(m for m in report.matches if m.entry_id == "nan-loss")
    assert any("last finite loss 2.29" in n for n in match.notes), match.notes


@pytest.mark.parametrize("line, entry", [
    # conv/linear type checks: the type names differ by version and path
    ("RuntimeError: Input type (c10::Half) and bias type (float) should be the same", "dtype-mismatch"),
    ("RuntimeError: Input type (double) and weight type (float) should be the same", "dtype-mismatch"),
    ("RuntimeError: Input type (CUDABFloat16Type) and weight type (torch.cuda.FloatTensor) should be the same",
     "dtype-mismatch"),
    ("RuntimeError: Input type (torch.cuda.FloatTensor) and bias type (torch.cuda.HalfTensor) should be the same",
     "dtype-mismatch"),
    # a device difference stays a device problem
    ("RuntimeError: Input type (torch.cuda.HalfTensor) and weight type (torch.FloatTensor) should be the same",
     "input-weight-device-mismatch"),
])
def test_input_and_parameter_type_checks(line: str, entry: str) -> None:
    assert top_cause(line)[0] == entry


@pytest.mark.parametrize("line", [
    # NCCL 2.12-era and 2.2x-era wordings of an InfiniBand completion error
    "node3:77:91 [2] NCCL INFO NET/IB : Got completion from peer 10.0.0.7<4242> with error 12, opcode 0, "
    "len 0, vendor err 129",
    "node3:77:91 [2] ib_plugin.c:1615 NCCL WARN NET/IB: Got completion from peer 10.0.0.7<4242> with "
    "status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129 localGid ::ffff:10.0.0.3 hca mlx5_0",
])
def test_infiniband_completion_errors_are_a_peer_or_network_failure(line: str) -> None:
    assert top_cause(line)[0] == "nccl-remote-error"


def test_a_python_traceback_through_a_collective_is_not_a_stack_dump_hang() -> None:
    text = ('Traceback (most recent call last):\n'
            '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", '
            'line 2050, in all_reduce\n'
            '    work.wait()\n'
            'RuntimeError: NCCL communicator was aborted on rank 1.')
    assert "collective-hang" not in top_cause(text)[1]


@pytest.mark.parametrize("text", [
    # faulthandler.dump_traceback_later() of a stuck rank (no comma before "in")
    'Timeout (0:30:00)!\nThread 0x00007f3a (most recent call first):\n'
    '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 4166 in barrier\n'
    '  File "/srv/job/train.py", line 88 in main',
    # py-spy dump with full paths
    'Thread 31 (idle): "MainThread"\n'
    '    all_reduce (/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:2501)\n'
    '    train_step (train.py:214)',
    # TORCH_DISTRIBUTED_DEBUG=DETAIL turns the hang into this error
    "RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: "
    "CollectiveFingerPrint(SequenceNumber=12, OpType=ALLREDUCE), but Rank 1 is running collective: "
    "CollectiveFingerPrint(SequenceNumber=12, OpType=BROADCAST).",
])
def test_stack_dumps_of_ranks_waiting_in_a_collective(text: str) -> None:
    assert top_cause(text)[0] == "collective-hang"


@pytest.mark.parametrize("text, entry", [
    ("torch._inductor.exc.TritonMissing: Cannot find a working triton installation. Either the package is "
     "not installed or it is too old.", "compile-triton-missing"),
    ("torch._inductor.exc.GPUTooOldForTriton: Found Tesla P40 which is too old to be supported by the triton "
     "GPU compiler, which is used as the backend. Triton only supports devices of CUDA Capability >= 7.0, but "
     "your device is of CUDA capability 6.1", "compile-gpu-too-old-for-triton"),
    ("RuntimeError: Error(s) in loading state_dict for GPT:\n\tsize mismatch for lm_head.weight: copying a param "
     "with shape torch.Size([50257, 768]) from checkpoint, the shape in current model is torch.Size([50304, 768]).",
     "state-dict-size-mismatch"),
    ("RuntimeError: Attempting to deserialize object on CUDA device 3 but torch.cuda.device_count() is 1. Please "
     "use torch.load with map_location to map your storages to an existing device.", "torch-load-map-location"),
    ("RuntimeError: Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False. If "
     "you are running on a CPU-only machine, please use torch.load with map_location=torch.device('cpu') to map "
     "your storages to the CPU.", "torch-load-map-location"),
    ("[rank1]: RuntimeError: Expected to mark a variable ready only once. This error is caused by one of the "
     "following reasons: 1) Use of a module parameter outside the `forward` function.", "ddp-variable-ready-twice"),
    ("gpu-node-4:311:402 [0] misc/shmutils.cc:72 NCCL WARN Error: failed to extend /dev/shm/nccl-Wx81ab to "
     "9637892 bytes", "nccl-system-error"),
])
def test_entries_added_for_common_failures_the_catalog_lacked(text: str, entry: str) -> None:
    assert top_cause(text)[0] == entry


@pytest.mark.parametrize("text", [
    # shape and recompile messages that share words with the entries above but are other failures
    "RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x512 and 256x10)",
    "W0110 12:27:06.332000 158 torch/_dynamo/convert_frame.py:1551] [2/8]    last reason: 2/7: tensor 'X[0]' "
    "size mismatch at index 1. expected 640, actual 8.",
    "RuntimeError: The size of tensor a (128) must match the size of tensor b (64) at non-singleton dimension 1",
])
def test_near_misses_are_not_claimed(text: str) -> None:
    first, ids = top_cause(text)
    assert first not in {"dtype-mismatch", "state-dict-size-mismatch"}, ids
