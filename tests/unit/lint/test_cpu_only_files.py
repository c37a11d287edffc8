"""A file whose only device is the CPU is not GPU code (twelfth held-out round: jcjohnson/
pytorch-examples sets `device = torch.device('cpu')` and leaves `# device = torch.device('cuda')`
commented out; GD502 reported its per-step `loss.item()` as waiting for the GPU, 3 false
positives). The "GPU code" test reads the source text, where the commented line and the word
`device` matched; a file whose every device value is the CPU now gets no GPU advice. A CUDA device,
a device from a parameter or from `args.device`, or a `.cuda()` call still make it GPU code."""

from __future__ import annotations

from gpudoctor.lint.config import LintConfig
from gpudoctor.lint.engine import lint_text
from gpudoctor.lint.registry import select_rules

SCRIPT = """\
\"\"\"Two-layer net; uncomment the CUDA line to run on the GPU.\"\"\"
import torch

device = {device}
# device = torch.device('cuda') # Uncomment this to run on GPU

x = torch.randn(64, 1000, device=device)
y = torch.randn(64, 10, device=device)
model = torch.nn.Sequential(torch.nn.Linear(1000, 100), torch.nn.ReLU(), torch.nn.Linear(100, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
for t in range(500):
    loss = (model(x) - y).pow(2).sum()
    print(t, loss.item())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def _codes(source: str) -> list[str]:
    return [v.code for v in lint_text(source, "two_layer_net.py", select_rules(["GD502"]), LintConfig())]


def test_a_cpu_only_script_gets_no_gpu_sync_advice() -> None:
    assert _codes(SCRIPT.format(device="torch.device('cpu')")) == []


def test_the_same_script_on_cuda_is_still_reported() -> None:
    assert _codes(SCRIPT.format(device="torch.device('cuda')")) == ["GD502"]


def test_a_device_from_the_command_line_is_still_reported() -> None:
    assert _codes(SCRIPT.format(device="torch.device(args.device)")) == ["GD502"]


def test_a_cuda_call_in_a_cpu_device_script_is_still_reported() -> None:
    source = SCRIPT.format(device="torch.device('cpu')").replace(".to(device)", ".to(device).cuda()")
    assert _codes(source) == ["GD502"]
