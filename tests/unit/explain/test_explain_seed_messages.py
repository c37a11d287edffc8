"""The seeds' messages the catalog learned in issue 18: each, inside a realistic multi-line log (training
lines, warnings, a traceback around it), is ranked first; and a log whose losses turn nan says where."""

from __future__ import annotations

import pytest

from gpudoctor.explain import explain_text

TRAIN = "".join(f"epoch 1 | step {i * 10} | loss {2.5 - i * 0.01:.3f} | lr 1.0e-04 | 312 ms/step\n" for i in range(1, 30))
TRACEBACK = 'Traceback (most recent call last):\n  File "train.py", line 88, in <module>\n    main()\n' \
            '  File "train.py", line 61, in main\n    for step, batch in enumerate(loader):\n'
SETUP = ("/opt/conda/lib/python3.11/site-packages/torch/cuda/__init__.py:61: FutureWarning: The pynvml package "
         "is deprecated.\nloading dataset from /data/train ... 120000 samples\nmodel: 124.4M parameters\n")

CASES = {
    "numpy-on-tensor-requiring-grad": SETUP + TRAIN + TRACEBACK
    + "  File \"train.py\", line 74, in main\n    plt.plot(out.numpy())\n"
      "RuntimeError: Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.\n",
    "dict-has-no-to": SETUP + TRACEBACK + "  File \"train.py\", line 62, in main\n    batch = batch.to(device)\n"
    "AttributeError: 'dict' object has no attribute 'to'\n",
    "cuda-reinit-forked-subprocess": SETUP + TRACEBACK
    + "RuntimeError: Caught RuntimeError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
      "  File \"dataset.py\", line 30, in __getitem__\n    return self.x[i].cuda()\n"
      "RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use "
      "the 'spawn' start method\n",
    "pin-memory-cuda-tensor": SETUP + TRACEBACK
    + "  File \"/opt/conda/lib/python3.11/site-packages/torch/utils/data/_utils/pin_memory.py\", line 64, in pin_memory\n"
      "    return data.pin_memory(device)\nRuntimeError: cannot pin 'torch.cuda.FloatTensor' only dense CPU tensors "
      "can be pinned\n",
    "sampler-with-shuffle": SETUP + "[rank0]: Traceback (most recent call last):\n[rank0]:   File \"train.py\", "
    "line 40, in <module>\n[rank0]:     loader = DataLoader(ds, shuffle=True, sampler=sampler)\n"
    "[rank0]: ValueError: sampler option is mutually exclusive with shuffle\n",
    "host-memory-errno12": SETUP + TRAIN + TRACEBACK
    + "  File \"/opt/conda/lib/python3.11/multiprocessing/popen_fork.py\", line 66, in _launch\n"
      "    self.pid = os.fork()\nOSError: [Errno 12] Cannot allocate memory\n",
    "dataloader-too-many-workers": SETUP
    + "/opt/conda/lib/python3.11/site-packages/torch/utils/data/dataloader.py:617: UserWarning: This DataLoader will "
      "create 32 worker processes in total. Our suggested max number of worker in current system is 8, which is "
      "smaller than what this DataLoader is going to create.\n" + TRAIN,
    "store-waiting-for-clients": SETUP + "[W socket.cpp:697] [c10d] The client socket has timed out after 900s "
    "while trying to connect to (10.0.0.1, 29500).\n" + TRACEBACK
    + "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.\n",
    "segfault-core-dumped": SETUP + "starting 8 dataloader workers\n" + "".join(TRAIN.splitlines(keepends=True)[:5])
    + "Segmentation fault (core dumped)\n",
    "grad-norm-nonfinite": SETUP + "".join(
        f"10/30 22:{i:02d}:02 - mmengine - INFO - Epoch(train) [1][{i * 10}/735]  lr: 1.98e-04  loss: 2.{i:02d}  "
        f"grad_norm: {'nan' if i > 20 else '3.06'}\n" for i in range(1, 25)),
    "dataloader-shared-memory": SETUP + TRAIN + "Traceback (most recent call last):\n  File "
    "\"/opt/conda/lib/python3.11/multiprocessing/queues.py\", line 244, in _feed\n    obj = _ForkingPickler.dumps(obj)\n"
    "    fd, size = storage._share_fd_cpu_()\nRuntimeError: unable to write to file </torch_4120_2553147136_0>: "
    "No space left on device (28)\n",
}


@pytest.mark.parametrize("entry_id", sorted(CASES))
def test_the_message_inside_a_realistic_log_ranks_first(entry_id: str) -> None:
    report = explain_text(CASES[entry_id])
    assert report.matches and report.matches[0].entry_id == entry_id, [m.entry_id for m in report.matches]


def test_worker_segfault_message_outranks_the_bare_segfault_line() -> None:
    log = ("ERROR: Unexpected segmentation fault encountered in worker.\nRuntimeError: DataLoader worker (pid 624) "
           "is killed by signal: Segmentation fault.\nSegmentation fault (core dumped)\n")
    assert [m.entry_id for m in explain_text(log).matches] == ["dataloader-worker-segfault"]


@pytest.mark.parametrize("log,note", [
    (TRAIN + "epoch 1 | step 300 | loss nan | lr 1.0e-04\nepoch 1 | step 310 | loss nan | lr 1.0e-04\n",
     "loss turned nan at step 300 (line 30); last finite loss 2.210 at step 290 (line 29)"),
    ("Epoch: 1 | loss=0.52\nEpoch: 2 | loss=0.48\nEpoch: 3 | Loss: inf\n",
     "loss turned inf at epoch 3 (line 3); last finite loss 0.48 at epoch 2 (line 2)"),
    ("iter 0: loss 10.9712, time 1200ms\niter 10: loss 7.2\niter 20: loss nan, time 90ms\n",
     "loss turned nan at iter 20 (line 3); last finite loss 7.2 at iter 10 (line 2)"),
], ids=["step-and-epoch", "epoch-inf", "nanogpt-iter"])
def test_nan_losses_without_an_error_line_say_where_they_turned(log: str, note: str) -> None:
    match = explain_text(log).matches[0]
    assert match.entry_id == "nan-loss" and match.confidence >= 0.8
    assert note in match.notes


def test_a_log_that_starts_non_finite_says_so() -> None:
    match = explain_text("step 0 | loss: nan\nstep 1 | loss: nan\n").matches[0]
    assert match.entry_id == "nan-loss"
    assert match.notes and match.notes[0].startswith("loss is already nan at its first value in the log (step 0")


def test_finite_losses_and_loss_scale_lines_are_not_a_nan_loss() -> None:
    assert not [m for m in explain_text(TRAIN + "loss_scale: 65536.0 | grad_norm: 1.2\n").matches]
