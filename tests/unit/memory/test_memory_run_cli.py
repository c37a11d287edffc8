"""``gpudoctor memory run`` on the CPU: the real launcher end to end, and the stage probes' order
with a stand-in allocator (the CPU allocator keeps no statistics)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from gpudoctor.records.rundir import load_run

SRC = Path(__file__).resolve().parents[3] / "src"

TRAIN = """
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
ds = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
model = nn.Linear(4, 1)
opt = torch.optim.AdamW(model.parameters())
for epoch in range(3):
    for x, y in DataLoader(ds, batch_size=8):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
"""

# The memory probes in-process, with a stand-in for torch.cuda's counters: each read returns the
# next multiple of 100, so the order of the lines shows which stage was recorded when.
PROBE_ORDER = """
import os, sys
from pathlib import Path
import torch
from torch import nn
from gpudoctor.collectors.instrument import memory_probe, patches
from gpudoctor.collectors.instrument.state import S

class Cuda:
    n = 0
    resets = 0
    def memory_allocated(self):
        Cuda.n += 100
        return Cuda.n
    def memory_reserved(self):
        return 4096
    def max_memory_allocated(self):
        return Cuda.n + 1
    def reset_peak_memory_stats(self):
        Cuda.resets += 1

class FakeTorch:
    cuda = Cuda()

S.installed = True
S.run_dir = Path(sys.argv[1])
S.owner_pid = os.getpid()
memory_probe._cuda_ready = lambda: FakeTorch
memory_probe._start_history = lambda torch: None
if sys.argv[2] == "modules":  # the module hooks read torch.cuda's counters: the stand-in's
    os.environ["GPUDOCTOR_MEMORY_MODULES"] = "1"
    for name in ("memory_allocated", "max_memory_allocated", "reset_peak_memory_stats"):
        setattr(torch.cuda, name, getattr(FakeTorch.cuda, name))
patches.install_all()
memory_probe.install(2)
import torch.optim.optimizer as optim_mod
optim_mod.register_optimizer_step_post_hook(lambda *a: setattr(S, "step", S.step + 1))
model = nn.Linear(4, 1) if sys.argv[2] != "modules" else nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(32, 4)), batch_size=8)
order = sys.argv[2]
for (x,) in data:
    patches._note_h2d(x, 0.0, True)  # stands in for x.to("cuda"): the first copy of the step
    if order == "accumulate":
        model(x).sum().backward()
        model(x).sum().backward()  # accumulation: only the first forward and backward are stages
        opt.step()
        opt.zero_grad()
    elif order == "imagenet":  # pytorch/examples' imagenet: zero_grad between forward and backward
        loss = model(x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    elif order == "zero_first":  # zero_grad, forward, loss, backward, step
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), torch.zeros(8, 1))
        loss.backward()
        opt.step()
    elif order == "modules":
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
    else:  # "functional": a forward that is no module call: the forward stage comes at backward()
        (x @ model.weight.t()).sum().backward()
        opt.step()
        opt.zero_grad()
print("resets", Cuda.resets)
"""


# The probes in-process on a script without a DataLoader (issue 22's ResNet script, small), with a
# stand-in allocator driven by the script's own tensors: a copy "to the GPU" (Tensor.cuda) is a CPU
# clone whose bytes count until it is garbage; the model keeps ACT bytes of activations from its
# forward to its backward; each parameter's gradient counts from backward to zero_grad.
NO_LOADER = """
import os, sys, weakref
from pathlib import Path
import torch
from torch import nn
from gpudoctor.collectors.instrument import memory_probe, patches
from gpudoctor.collectors.instrument.state import S

ACT = 10_000

class Cuda:
    now = top = 0
    def memory_allocated(self):
        return Cuda.now
    def memory_reserved(self):
        return 1 << 30
    def max_memory_allocated(self):
        return Cuda.top
    def reset_peak_memory_stats(self):
        Cuda.top = Cuda.now

class FakeTorch:
    cuda = Cuda()

def alloc(n):
    Cuda.now += n
    Cuda.top = max(Cuda.top, Cuda.now)

def free(n):
    Cuda.now -= n

def nbytes(t):
    return t.numel() * t.element_size()

def on_device(t):  # a tensor on the stand-in GPU: its bytes count until it is garbage
    out = t.detach().clone()
    alloc(nbytes(out))
    weakref.finalize(out, free, nbytes(out))
    return out

def fake_cuda(self, *args, **kwargs):  # the host-to-device copy; weights are kept by the model
    if isinstance(self, nn.Parameter):
        alloc(nbytes(self))
        return self.detach().clone()
    return on_device(self)

class Keep(torch.autograd.Function):  # ACT bytes saved for backward, freed by it
    @staticmethod
    def forward(ctx, x):
        alloc(ACT)
        return x.clone()
    @staticmethod
    def backward(ctx, g):
        free(ACT)
        return g

class Spend(nn.Module):
    def forward(self, x):
        return Keep.apply(x)

orig_zero_grad = torch.optim.Optimizer.zero_grad

def zero_grad(self, set_to_none=True):  # set_to_none: the gradients' bytes go
    free(sum(nbytes(p) for g in self.param_groups for p in g["params"] if p.grad is not None))
    return orig_zero_grad(self, set_to_none)

torch.optim.Optimizer.zero_grad = zero_grad
torch.Tensor.cuda = fake_cuda
S.installed = True
S.run_dir = Path(sys.argv[1])
S.owner_pid = os.getpid()
memory_probe._cuda_ready = lambda: FakeTorch
memory_probe._start_history = lambda torch: None
patches.install_all()
memory_probe.install(2)
import torch.optim.optimizer as optim_mod
optim_mod.register_optimizer_step_post_hook(lambda *a: setattr(S, "step", S.step + 1))
model = nn.Sequential(nn.Linear(4, 3), Spend(), nn.Linear(3, 1)).cuda()  # 76 bytes of weights
for p in model.parameters():
    p.register_post_accumulate_grad_hook(lambda p: alloc(nbytes(p)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 4), torch.randn(8, 1)  # 160 bytes, made once on the host
order = sys.argv[2]
if order == "loader":  # a start-up copy, then a DataLoader: the model line is the loader's
    class_weights = torch.ones(10).cuda()
    batches = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x.repeat(3, 1), y.repeat(3, 1)),
                                          batch_size=8)
else:
    batches = [(x, y)] * 3
for xs, ys in batches:
    if order == "zero_first":
        opt.zero_grad(set_to_none=True)
    if order == "on_device":  # no copy: the batch is made on the device
        xb, yb = on_device(xs), on_device(ys)
    else:
        xb, yb = xs.cuda(non_blocking=True), ys.cuda()
    loss = nn.functional.mse_loss(model(xb), yb)
    if order != "zero_first":
        opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    env.pop("GPUDOCTOR_RUN_DIR", None)
    return env


def _probe_order(tmp_path: Path, order: str, script_text: str = PROBE_ORDER) -> tuple[list, str]:
    script = tmp_path / "probe.py"
    script.write_text(script_text, encoding="utf-8")
    result = subprocess.run([sys.executable, str(script), str(tmp_path), order], env=_env(),
                            capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stderr
    (lines,) = load_run_memory(tmp_path)
    return lines, result.stdout


def test_stage_probes_record_each_stage_of_the_first_k_steps_in_order(tmp_path: Path) -> None:
    lines, out = _probe_order(tmp_path, "accumulate")
    assert "resets 12" in out  # the peak is reset at every recorded stage
    assert [(s.stage, s.step) for s in lines] == [
        ("model", 0), ("batch", 0), ("forward", 0), ("loss", 0), ("backward", 0), ("optimizer", 0),
        ("zero_grad", 1),  # called after step 0's optimizer step: it belongs to step 1
        ("batch", 1), ("forward", 1), ("loss", 1), ("backward", 1), ("optimizer", 1),
    ]
    # one counter read per line, two for zero_grad (before and after the call)
    assert [s.allocated_bytes for s in lines] == [100, 200, 300, 400, 500, 600, 800, 900, 1000, 1100, 1200, 1300]
    assert all(s.peak_allocated_bytes == s.allocated_bytes + 1 for s in lines)


def test_stages_follow_the_scripts_order_when_zero_grad_comes_between_forward_and_backward(
        tmp_path: Path) -> None:
    # pytorch/examples' imagenet order: the activations must be under forward, not zero_grad
    lines, _ = _probe_order(tmp_path, "imagenet")
    assert [(s.stage, s.step) for s in lines] == [
        ("model", 0), ("batch", 0), ("forward", 0), ("zero_grad", 0), ("loss", 0), ("backward", 0),
        ("optimizer", 0),
        ("batch", 1), ("forward", 1), ("zero_grad", 1), ("loss", 1), ("backward", 1), ("optimizer", 1),
    ]


def test_stages_follow_the_scripts_order_when_zero_grad_comes_first(tmp_path: Path) -> None:
    lines, _ = _probe_order(tmp_path, "zero_first")
    assert [s.stage for s in lines] == [
        "model", "batch", "zero_grad", "forward", "loss", "backward", "optimizer",
        "batch", "zero_grad", "forward", "loss", "backward", "optimizer",
    ]


def test_modules_are_measured_in_one_step_and_stage_peaks_stay_whole(tmp_path: Path) -> None:
    from gpudoctor.records.base import read_jsonl
    from gpudoctor.records.memory import ModuleMemory
    from gpudoctor.records.rundir import KIND_MODULES, modules_file

    lines, _ = _probe_order(tmp_path, "modules")
    assert [s.stage for s in lines][:6] == ["model", "batch", "forward", "loss", "backward", "optimizer"]
    modules = list(read_jsonl(tmp_path / modules_file(0), ModuleMemory, kind=KIND_MODULES))
    assert {(m.name, m.type, m.depth, m.step) for m in modules} == {
        ("", "Sequential", 0, 1), ("0", "Linear", 1, 1), ("1", "ReLU", 1, 1), ("2", "Linear", 1, 1)}
    assert all(m.calls == 1 for m in modules)


def test_a_forward_that_is_no_module_call_is_recorded_at_backward(tmp_path: Path) -> None:
    lines, _ = _probe_order(tmp_path, "functional")
    assert [s.stage for s in lines][:6] == ["model", "batch", "forward", "backward", "optimizer", "zero_grad"]
    assert "loss" not in {s.stage for s in lines}


def test_without_a_dataloader_the_forward_holds_the_activations_and_the_batch_is_seen(tmp_path: Path) -> None:
    # issue 22: the model line was taken at the forward's end (it held step 0's activations), the
    # forward line read 0 B, and batch, activations and gradients were "not seen"
    from gpudoctor.analysis.memory_stages import stage_parts, stage_rows

    lines, _ = _probe_order(tmp_path, "copy", NO_LOADER)
    assert [(s.stage, s.step) for s in lines] == [
        ("model", 0), ("batch", 0), ("forward", 0), ("zero_grad", 0), ("loss", 0), ("backward", 0),
        ("optimizer", 0),
        ("batch", 1), ("forward", 1), ("zero_grad", 1), ("loss", 1), ("backward", 1), ("optimizer", 1),
    ]
    rows = stage_rows(lines)
    assert [(r.stage, r.allocated_bytes, r.delta_bytes) for r in rows[:3]] == [
        ("model", 76, 76),  # the weights only: read before the first copy that is no model move
        ("batch", 236, 160),  # x and y
        ("forward", 10236, 10000),  # the activations
    ]
    assert (rows[9].stage, rows[9].freed_bytes) == ("zero_grad", 76)  # step 0's gradients
    parts = stage_parts(lines)
    assert (parts.model_bytes, parts.batch_bytes, parts.activation_bytes, parts.gradient_bytes) == (
        76, 160, 10_000, 76)


def test_without_a_dataloader_zero_grad_first_keeps_the_batch(tmp_path: Path) -> None:
    from gpudoctor.analysis.memory_stages import stage_parts

    lines, _ = _probe_order(tmp_path, "zero_first", NO_LOADER)
    assert [(s.stage, s.step) for s in lines][:4] == [("model", 0), ("zero_grad", 0), ("batch", 0), ("forward", 0)]
    assert [(s.stage, s.step) for s in lines][6:9] == [("optimizer", 0), ("zero_grad", 1), ("batch", 1)]
    parts = stage_parts(lines)
    assert (parts.model_bytes, parts.batch_bytes, parts.activation_bytes, parts.gradient_bytes) == (
        76, 160, 10_000, 76)


def test_a_batch_made_on_the_device_is_in_the_model_line_at_step_0_only(tmp_path: Path) -> None:
    from gpudoctor.analysis.memory_stages import stage_parts

    lines, _ = _probe_order(tmp_path, "on_device", NO_LOADER)
    assert [(s.stage, s.step) for s in lines][:3] == [("model", 0), ("forward", 0), ("zero_grad", 0)]
    assert [(s.stage, s.step) for s in lines][6:8] == [("batch", 1), ("forward", 1)]
    assert lines[0].allocated_bytes == 76 + 160  # no copy to read before: the batch is in it
    parts = stage_parts(lines)
    assert parts.batch_bytes is None  # not separable at step 0, and said so ("not seen")
    assert (parts.activation_bytes, parts.gradient_bytes) == (10_000, 76)


def test_with_a_dataloader_the_model_line_is_the_loaders_after_a_start_up_copy(tmp_path: Path) -> None:
    lines, _ = _probe_order(tmp_path, "loader", NO_LOADER)
    assert [s.stage for s in lines][:3] == ["model", "batch", "forward"]
    # taken at the first batch, as always: the class weights copied at start-up are in it; the
    # batch line follows the step's first copy (x, 128 bytes), as always
    assert [(s.allocated_bytes) for s in lines[:3]] == [76 + 40, 76 + 40 + 128, 76 + 40 + 160 + 10_000]


def load_run_memory(path: Path) -> list:
    from gpudoctor.records.base import read_jsonl
    from gpudoctor.records.memory import StageMemory
    from gpudoctor.records.rundir import KIND_MEMORY, memory_file

    return [list(read_jsonl(path / memory_file(0), StageMemory, kind=KIND_MEMORY))]


def test_memory_run_on_cpu_says_it_needs_a_gpu_and_finishes(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "memory", "run", "--steps", "6", "--json", "--out", "rd",
         "--", sys.executable, "train.py"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=90,
    )
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["exit_code"] == 0 and payload["manifest"]["status"] == "stopped"
    memory = payload["memory"]
    assert memory["on_gpu"] is False and memory["rows"] == []
    assert "memory stages need a CUDA GPU" in memory["notes"][0]
    run = load_run(tmp_path / "rd")
    assert len(run.steps[0]) == 6 and run.memory == {} and run.oom is None
    assert "profiler window off (memory mode)" in run.manifest.notes
    assert not (tmp_path / "rd" / "memory-rank0.jsonl").exists()

    text = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "memory", "run", "--steps", "3", "--out", "rd2",
         "--", sys.executable, "train.py"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=90,
    )
    assert text.returncode == 0, text.stderr
    assert "memory stages need a CUDA GPU" in text.stdout and "run directory: rd2" in text.stdout


def test_memory_run_rejects_bad_stages(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "memory", "run", "--stages", "0", "--out", "rd",
         "--", sys.executable, "-c", "pass"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2 and "--stages 0" in result.stderr
    assert not (tmp_path / "rd").exists()  # nothing was started


def test_run_directory_reads_the_first_rank_oom_snapshot_under_torchrun(tmp_path: Path) -> None:
    from gpudoctor.core.memory_history import KIND_OOM
    from gpudoctor.records.base import write_json
    from gpudoctor.records.rundir import MANIFEST
    from gpudoctor.records.run import RunManifest

    write_json(tmp_path / MANIFEST, RunManifest(command=("torchrun", "x.py"), started_at=0.0), kind="run_manifest")
    import memory_run_data

    snap = memory_run_data.oom()
    write_json(tmp_path / "oom-rank10.json", snap, kind=KIND_OOM)
    write_json(tmp_path / "oom-rank2.json", dataclasses.replace(snap, device=2), kind=KIND_OOM)
    (tmp_path / "oom-rankX.json").write_text("not a rank file", encoding="utf-8")
    assert load_run(tmp_path).oom.device == 2  # rank 2 before rank 10: numbers, not text order


def test_memory_without_a_subcommand_runs_the_command(tmp_path: Path) -> None:
    # the form the issue names: `gpudoctor memory -- CMD` (with run's options before the --)
    (tmp_path / "train.py").write_text(TRAIN, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "memory", "--steps", "3", "--json", "--out", "rd",
         "--", sys.executable, "train.py"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=90,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["manifest"]["steps_recorded"] == [3]
    assert "profiler window off (memory mode)" in load_run(tmp_path / "rd").manifest.notes
