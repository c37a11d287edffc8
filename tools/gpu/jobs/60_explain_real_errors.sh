#!/usr/bin/env bash
# gpudoctor explain against failures produced for real on the GPU machine (issue 6): torch 2.11 /
# CUDA 13 wording of OOM, fragmentation, device-side assert, device mismatch, invalid ordinal,
# NCCL duplicate GPU under torchrun, DDP unused parameters, weights_only, GradScaler, anomaly NaN,
# backward twice, recompile limit. Budget: 150 s on one H200 (kind: nvidia-h200).
# Run from the repo root with PYTHONPATH=src and JOB_OUT set (tools/gpu/run_all.sh does both).
# Outputs under $JOB_OUT, and where to commit them:
#   logs/<case>.log, expected.json  -> tests/fixtures/explain/h200/   (picked up by
#                                      tests/unit/explain/test_explain_h200.py)
#   summary.txt                     -> docs/examples/explain-h200.txt
#   json/<case>.json, job.log        (evidence; not committed)
set -uo pipefail
PY=${PYTHON:-python3}
OUT=${JOB_OUT:?set JOB_OUT}
mkdir -p "$OUT/logs" "$OUT/json" "$OUT/scripts"
declare -A EXPECT

case_py() {  # case_py NAME EXPECTED_ID PYTHON_SOURCE: run the source, keep stdout+stderr
  local name=$1 expected=$2 src=$3
  EXPECT[$name]=$expected
  printf '%s\n' "$src" > "$OUT/scripts/$name.py"
  timeout 90 "$PY" "$OUT/scripts/$name.py" > "$OUT/logs/$name.log" 2>&1
  echo "$name: exit $?"
}

case_torchrun() {  # case_torchrun NAME EXPECTED_ID PYTHON_SOURCE: 2 ranks under torchrun
  local name=$1 expected=$2 src=$3
  EXPECT[$name]=$expected
  printf '%s\n' "$src" > "$OUT/scripts/$name.py"
  timeout 120 "$PY" -m torch.distributed.run --standalone --nproc_per_node=2 \
    "$OUT/scripts/$name.py" > "$OUT/logs/$name.log" 2>&1
  echo "$name: exit $?"
}

case_py oom_request_exceeds_gpu oom-request-exceeds-gpu '
import torch
x = torch.empty(300 * 2**30, dtype=torch.uint8, device="cuda")'

case_py oom_fragmentation oom-fragmentation '
import torch
total = torch.cuda.get_device_properties(0).total_memory
torch.cuda.set_per_process_memory_fraction(16 * 2**30 / total)  # a 16 GiB budget
segment = torch.empty(14 * 2**30, dtype=torch.uint8, device="cuda")
del segment                          # one cached 14 GiB segment
blocks = [torch.empty(2**30, dtype=torch.uint8, device="cuda") for _ in range(14)]  # split from it
del blocks[::2]                      # 7 GiB free in 1 GiB holes that cannot be released
big = torch.empty(3 * 2**30, dtype=torch.uint8, device="cuda")'

case_py device_side_assert device-side-assert '
import torch
logits = torch.randn(8, 10, device="cuda")
labels = torch.full((8,), 12, device="cuda")   # class 12 of 10
loss = torch.nn.functional.cross_entropy(logits, labels)
print(loss.item())'

case_py device_mismatch tensors-on-different-devices '
import torch
a = torch.randn(4, 4, device="cuda")
b = torch.randn(4, 4)
print(a @ b)'

case_py invalid_ordinal invalid-device-ordinal '
import torch
torch.zeros(1, device=f"cuda:{torch.cuda.device_count() + 3}")'

case_py weights_only torch-load-weights-only '
import torch
class Config:
    lr = 0.1
torch.save({"config": Config(), "w": torch.zeros(2)}, "/tmp/gd_ckpt.pt")
torch.load("/tmp/gd_ckpt.pt")'

case_py unscale_fp16 unscale-fp16-gradients '
import torch
model = torch.nn.Linear(8, 8).cuda().half()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
loss = model(torch.randn(4, 8, device="cuda", dtype=torch.half)).float().sum()
scaler.scale(loss).backward()
scaler.unscale_(opt)'

case_py anomaly_nan nan-in-backward '
import torch
torch.autograd.set_detect_anomaly(True)
x = torch.zeros(3, device="cuda", requires_grad=True)
(x / x).sum().backward()'

case_py backward_twice backward-twice '
import torch
w = torch.randn(4, 4, device="cuda", requires_grad=True)
loss = (w.exp() * 2).sum()
loss.backward()
loss.backward()'

case_py recompile_limit compile-recompile-limit '
import torch
@torch.compile(backend="eager", dynamic=False)
def f(x, n):
    return x * n
x = torch.randn(4, device="cuda")
for n in range(12):
    f(x, n)
print("done")'

case_torchrun ddp_same_gpu nccl-duplicate-gpu '
import os, torch, torch.distributed as dist
dist.init_process_group("nccl")
torch.cuda.set_device(0)              # the bug: every rank on GPU 0
t = torch.ones(1, device="cuda")
dist.all_reduce(t)
print(t.item())'

case_torchrun ddp_unused_params ddp-unused-parameters '
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.used = torch.nn.Linear(4, 4)
        self.unused = torch.nn.Linear(4, 4)
    def forward(self, x):
        return self.used(x)
m = DDP(M())
for _ in range(2):
    m(torch.randn(2, 4)).sum().backward()
print("done")'

# explain every log; write expected.json and a summary table
{
  echo "{"
  first=1
  for name in "${!EXPECT[@]}"; do
    [ $first -eq 1 ] || echo ","
    first=0
    printf '  "%s": "%s"' "$name" "${EXPECT[$name]}"
  done
  echo; echo "}"
} > "$OUT/expected.json"

{
  printf '%-26s %-28s %-28s %s\n' case expected top-root ok
  for name in $(printf '%s\n' "${!EXPECT[@]}" | sort); do
    "$PY" -m gpudoctor explain --json "$OUT/logs/$name.log" > "$OUT/json/$name.json" 2>/dev/null
    top=$("$PY" -c 'import json,sys
d=json.load(open(sys.argv[1]))["report"]["matches"]
roots=[m["entry_id"] for m in d if m["role"]=="root"] or [m["entry_id"] for m in d]
print(roots[0] if roots else "-")' "$OUT/json/$name.json" 2>/dev/null || echo error)
    ok=no; [ "$top" = "${EXPECT[$name]}" ] && ok=yes
    printf '%-26s %-28s %-28s %s\n' "$name" "${EXPECT[$name]}" "$top" "$ok"
  done
} > "$OUT/summary.txt"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >> "$OUT/summary.txt" 2>&1
cat "$OUT/summary.txt"
