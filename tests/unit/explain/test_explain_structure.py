"""explain by structure: a log's failure parsed into exception, template, frames, rank, warnings;
the situation those parts show changes the advice (OOM under evaluate(), in optimizer.step(), at
torch.load, inside a collective); nan/inf shown only in progress bars or metric lines; worker,
Triton, new-GPU and /dev/shm failures."""

from __future__ import annotations

import pytest

from gpudoctor.explain import explain_text, parse_catalog
from gpudoctor.explain.context import detect
from gpudoctor.explain.logparse import split_lines
from gpudoctor.explain.structure import failure_structure, template

_NEW_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
            "capacity of 23.65 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has "
            "22.61 GiB memory in use. Of the allocated memory 21.9 GiB is allocated by PyTorch, and 300.5 MiB "
            "is reserved by PyTorch but unallocated.")
_LIB = "/usr/lib/python3.10/site-packages/torch"


def _tb(*frames: tuple[str, str, str], error: str = _NEW_OOM, rank: str = "") -> str:
    lines = [f"{rank}Traceback (most recent call last):"]
    for file, func, code in frames:
        lines += [f'{rank}  File "{file}", line 10, in {func}', f"{rank}    {code}"]
    return "\n".join(lines + [rank + error])


def _top(text: str):
    report = explain_text(text)
    assert report.matches, "nothing matched"
    return report.matches[0]


def test_structure_reads_frames_rank_template_and_warnings() -> None:
    text = ("[rank1]: train.py:3: UserWarning: TypedStorage is deprecated\n"
            + _tb(("train.py", "main", "evaluate(model)"), ("train.py", "evaluate", "out = model(x)"),
                  (f"{_LIB}/nn/modules/module.py", "_call_impl", "return forward_call(*args)"),
                  rank="[rank1]: "))
    lines = split_lines(text)
    s = failure_structure(lines, len(lines) - 1)
    assert s.exception_type == "torch.OutOfMemoryError"
    assert s.functions == ("main", "evaluate", "_call_impl")
    assert s.frames[1].code == "out = model(x)"
    assert s.rank == 1
    assert s.warnings == ("UserWarning: TypedStorage is deprecated",)
    assert s.template.startswith("CUDA out of memory. Tried to allocate #")


def test_template_abstracts_numbers_and_names() -> None:
    assert template("Missing key(s) in state_dict: 'fc.weight', \"fc.bias\" at 0x7f3a 12 ranks") == \
        "Missing key(s) in state_dict: <name>, <name> at # # ranks"


def test_oom_under_evaluate_without_no_grad_says_no_grad_and_eval_batch() -> None:
    m = _top(_tb(("train.py", "main", "val = evaluate(model, loader)"),
                 ("train.py", "evaluate", "out = model(x)")))
    assert m.entry_id.startswith("oom")
    assert "no_grad" in m.notes[0]
    assert "torch.no_grad()" in m.fix[0] and "inference_mode" in m.fix[0]
    assert "eval batch size" in m.fix[1]


def test_oom_under_evaluate_already_under_no_grad_says_eval_batch_size() -> None:
    m = _top(_tb(("train.py", "main", "validate(model)"),
                 (f"{_LIB}/utils/_contextlib.py", "decorate_context", "return func(*args, **kwargs)"),
                 ("train.py", "validate", "out = model(x)")))
    assert "already under no_grad" in m.notes[0]
    assert "eval-time batch size" in m.fix[0]


def test_oom_in_a_plain_training_step_gets_no_situation_advice() -> None:
    m = _top(_tb(("train.py", "train_one_epoch", "loss = model(x).sum()")))
    assert not any("evaluation" in n or "optimizer" in n for n in m.notes)


def test_oom_in_optimizer_step_names_optimizer_state() -> None:
    m = _top(_tb(("train.py", "train_step", "optimizer.step()"),
                 (f"{_LIB}/optim/adam.py", "step", "self._init_group(group, params)"),
                 (f"{_LIB}/optim/adam.py", "_init_group", "state['exp_avg'] = torch.zeros_like(p)")))
    assert "optimizer" in m.notes[0] and "2 fp32" in m.notes[0]
    joined = " ".join(m.fix)
    for word in ("8-bit", "foreach=False", "fused", "ZeRO", "FSDP"):
        assert word in joined


def test_oom_at_torch_load_says_map_location_and_free_the_dict() -> None:
    m = _top(_tb(("train.py", "resume", "ckpt = torch.load(args.resume)"),
                 (f"{_LIB}/serialization.py", "load", "return _load(opened_zipfile)")))
    assert "checkpoint" in m.notes[0]
    assert 'map_location="cpu"' in m.fix[0]
    assert "del checkpoint" in m.fix[1]


def test_oom_inside_a_collective_says_so() -> None:
    m = _top(_tb(("train.py", "sync", "dist.all_reduce(t)"),
                 (f"{_LIB}/distributed/distributed_c10d.py", "all_reduce", "work = group.allreduce([tensor])")))
    assert "collective" in m.notes[0] and "NCCL" in m.notes[0]


@pytest.mark.parametrize("line", [
    "Epoch 3: 45%|████▌     | 450/1000 [02:11<02:40, 3.42it/s, v_num=1, train_loss_step=nan.0]",
    "100%|██████████| 500/500 [01:02<00:00,  8.01it/s, loss=nan, lr=0.0001]",
    "step 1200 | loss: inf | lr 3e-4",
    "Epoch 2/10: 100%|██████| 100/100 [00:10<00:00, val_loss_epoch=nan, train_loss_epoch=nan]",
])
def test_nan_in_progress_bars_and_metric_lines_is_a_numeric_failure(line: str) -> None:
    assert _top(line).entry_id == "nan-loss"


def test_lightning_step_metric_nan_was_missed_before() -> None:
    # the old pattern needed "loss" to end a word: train_loss_step=nan.0 matched nothing
    assert _top("450/1000 [02:11<02:40, v_num=1, train_loss_step=nan.0]").entry_id == "nan-loss"


def test_grad_norm_nan_under_an_fp16_scaler_explains_dynamic_loss_scaling() -> None:
    log = ("Using 16bit Automatic Mixed Precision (AMP) with torch.cuda.amp.GradScaler\n"
           "step 10 | loss 2.31 | grad_norm: nan\nstep 11 | loss 2.30 | grad_norm: 1.21\n")
    m = _top(log)
    assert m.entry_id == "grad-norm-nonfinite"
    assert "dynamic loss scaling" in m.notes[0] and "persistent" in m.notes[0]


def test_grad_norm_nan_without_a_scaler_gets_no_loss_scaling_note() -> None:
    m = _top("step 10 | loss 2.31 | grad_norm: nan\n")
    assert not any("loss scal" in n for n in m.notes)


_WORKER = '''Traceback (most recent call last):
  File "train.py", line 50, in <module>
    for x in loader:
  File "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py", line 1345, in _process_data
    data.reraise()
RuntimeError: Caught RuntimeError in DataLoader worker process 0.
Original Traceback (most recent call last):
  File "/usr/lib/python3/dist-packages/torch/utils/data/_utils/worker.py", line 308, in _worker_loop
    data = fetcher.fetch(index)
  File "ds.py", line 20, in __getitem__
    x = torch.tensor(a).cuda()
RuntimeError: CUDA error: initialization error
'''


def test_cuda_initialization_error_in_a_dataloader_worker_is_named() -> None:
    m = _top(_WORKER)
    assert m.entry_id == "cuda-init-error-dataloader-worker"
    assert "spawn" in " ".join(m.fix)


def test_cuda_initialization_error_outside_a_worker_is_not_claimed_as_one() -> None:
    ids = [m.entry_id for m in explain_text("RuntimeError: CUDA error: initialization error\n").matches]
    assert "cuda-init-error-dataloader-worker" not in ids


def test_entry_context_is_validated() -> None:
    toml = '''[[entry]]
id = "x"
title = "x"
category = "memory"
context = "somewhere"
anchors = ["x"]
patterns = ["x"]
cause = "x"
verify = ["x"]
fix = ["x"]
links = ["https://x.org"]
[[entry.samples]]
text = "x"
source = "a/b#1"
'''
    with pytest.raises(ValueError, match="unknown context"):
        parse_catalog({"t.toml": toml})


def test_triton_invalid_kernel_image_points_at_driver_and_ptxas() -> None:
    m = _top("RuntimeError: Triton Error [CUDA]: device kernel image is invalid")
    assert m.entry_id == "triton-kernel-image-invalid"
    joined = " ".join(m.fix)
    assert "driver" in joined and "TRITON_PTXAS_PATH" in joined


def test_cudnn_execution_failed_on_a_new_gpu_names_the_missing_sm() -> None:
    log = ("UserWarning: NVIDIA GeForce RTX 3090 with CUDA capability sm_86 is not compatible with the "
           "current PyTorch installation.\nThe current PyTorch install supports CUDA capabilities sm_37 "
           "sm_50 sm_60 sm_70.\nRuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED\n")
    report = explain_text(log)
    cudnn = next(m for m in report.matches if m.entry_id == "cudnn-status-error")
    assert any("too old for sm_86" in n for n in cudnn.notes)
    assert report.matches[0].entry_id == "no-kernel-image"
    assert any("too old for sm_86" in n for n in report.matches[0].notes)


def test_no_kernel_image_with_only_a_gpu_name_hedges_the_sm() -> None:
    m = _top("GPU 0: NVIDIA H100 80GB HBM3\nRuntimeError: CUDA error: no kernel image is available for "
             "execution on the device\n")
    assert any(n.startswith("if the build predates this GPU") and "sm_90" in n for n in m.notes)


def test_worker_exited_offers_docker_shm_first() -> None:
    m = _top("RuntimeError: DataLoader worker (pid 4711) exited unexpectedly with exit code 1.")
    assert m.entry_id == "dataloader-worker-exited"
    assert "shm" in m.fix[0] and "shared memory" in m.cause


@pytest.mark.parametrize("log", [
    "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).\n"
    "RuntimeError: DataLoader worker (pid 4711) exited unexpectedly with exit code 1.",
    "RuntimeError: DataLoader worker (pid 4711) is killed by signal: Bus error. It is possible that "
    "dataloader's workers are out of shared memory.",
])
def test_worker_death_with_a_bus_error_visible_is_shared_memory(log: str) -> None:
    assert _top(log).entry_id == "dataloader-shared-memory"


def test_situations_detected_from_frames_and_code() -> None:
    lines = split_lines(_tb(("train.py", "fit", "self.optimizer.step()")))
    situations = detect(failure_structure(lines, len(lines) - 1), "")
    assert "optimizer" in situations and "eval" not in situations
