"""``gpudoctor fix`` on shapes met in public training scripts outside the corpus
(benchmarks/results/fix/wild-cpu.md), each on a small script written here: where the change
goes, that the patched file parses, and, where it is cheap, that it still trains on the CPU.

- a model picked by name in an ``if``/``elif`` chain whose ``else`` raises (makemore);
- a forward that sums part of the loss in a loop (fast_neural_style's style loss);
- a full-batch step helper given the model as an argument (gcn, gat);
- a DDP trainer class that saves ``self.model.module.state_dict()`` (ddp-tutorial multigpu);
- ``nn.DataParallel`` or the script's own ``torch.compile``: no ``model.compile()`` (pytorch-cifar, nanoGPT);
- the conv net defined in an imported module of the project: channels_last (pytorch-cifar);
- gradient accumulation, the step in the loop around the backward's, ``scaler.step(optimizer)`` (nanoGPT).
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from gpudoctor.fix.locate import locate
from fix_planning import CPU, advice, planned, runs

PICKED_BY_NAME = """
    import sys
    import torch
    from torch import nn

    kind = sys.argv[1] if len(sys.argv) > 1 else "mlp"
    if kind == "mlp":
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    elif kind == "linear":
        model = nn.Linear(8, 1)
    else:
        raise ValueError(f"unknown model {kind}")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        x, y = torch.randn(4, 8), torch.randn(4, 1)
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("done")
"""


def test_a_model_picked_by_name_whose_else_raises_is_compiled_after_the_chain() -> None:
    found, plan, fixed = planned(PICKED_BY_NAME, "GD-RUN-LAUNCH-BOUND")
    assert isinstance(found.model_assign, ast.If)
    (change,) = plan.changes
    assert change.kind == "compile"
    lines = fixed.splitlines()
    at = lines.index("model.compile()")
    assert lines[at - 2].strip().startswith("raise ValueError") and lines[at + 1].startswith("opt = ")


STYLE_LOSS = """
    import torch
    from torch import nn

    net = nn.Sequential(nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 6))
    targets = [torch.randn(6, 6) for _ in range(3)]
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    for epoch in range(2):
        for i in range(3):
            optimizer.zero_grad()
            x = torch.randn(5, 6)
            y = net(x)
            content = (y - x).pow(2).mean()
            style = 0.0
            for t in targets:
                gram = y.t() @ y
                style += (gram - t).pow(2).mean()
                if style > 1e9:
                    break
            total = content + style
            total.backward()
            optimizer.step()
    print("done")
"""


def test_autocast_spans_a_loop_that_sums_part_of_the_loss(tmp_path: Path) -> None:
    found, plan, fixed = planned(STYLE_LOSS, "GD-RUN-FP32-COMPUTE", config=CPU)
    assert found.forward is not None and isinstance(found.forward[0], ast.Assign)
    bf16 = next(c for c in plan.changes if c.kind == "bf16")
    assert bf16.ops[0].at[0] == 12  # ``y = net(x)``: the block from the model call to ``total = ...``
    body = fixed[fixed.index('with torch.autocast("cpu"'):fixed.index("total.backward()")]
    assert "for t in targets:" in body and "total = content + style" in body
    assert "optimizer.step()" not in body and "optimizer.zero_grad()" not in body
    runs(fixed, tmp_path)


def test_a_loop_holding_a_backward_ends_the_forward() -> None:
    source = STYLE_LOSS.replace("            total = content + style\n",
                                "            for t in targets:\n                t.grad = None\n"
                                "                (t * 0).sum().backward()\n            total = content + style\n")
    found = locate(textwrap.dedent(source))
    assert found.forward is None  # that loop is not part of a forward: no autocast over it


FULL_BATCH = """
    import torch
    from torch import nn

    def train_step(epoch, net, optimizer, inputs, target):
        net.train()
        optimizer.zero_grad()
        out = net(*inputs)
        loss = nn.functional.mse_loss(out, target)
        loss.backward()
        optimizer.step()
        return loss

    class Graph(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 1)

        def forward(self, feats, adj):
            return adj @ self.lin(feats)

    feats, adj, target = torch.randn(10, 4), torch.eye(10), torch.randn(10, 1)
    model = Graph()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(3):
        train_step(epoch + 1, model, opt, (feats, adj), target)
    print("done")
"""


def test_a_step_helper_given_the_model_gets_autocast_by_its_parameter_name(tmp_path: Path) -> None:
    found, plan, fixed = planned(FULL_BATCH, "GD-RUN-FP32-COMPUTE", "GD-RUN-LAUNCH-BOUND", config=CPU)
    assert found.model == "model" and found.step_func is not found.func
    assert [o.at[0] for c in plan.changes if c.kind == "bf16" for o in c.ops] == [8]  # ``out = net(*inputs)``
    assert "    model.compile()" not in fixed and "model.compile()" in fixed
    runs(fixed.replace("model.compile()\n", ""), tmp_path)  # compile on this CPU takes too long for a unit test


DDP_TRAINER = """
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    class Trainer:
        def __init__(self, model, data, optimizer, gpu_id):
            self.gpu_id = gpu_id
            self.model = model.to(gpu_id)
            self.data = data
            self.optimizer = optimizer
            self.model = DDP(self.model, device_ids=[gpu_id])

        def _run_batch(self, source, targets):
            self.optimizer.zero_grad()
            output = self.model(source)
            loss = F.cross_entropy(output, targets)
            loss.backward()
            self.optimizer.step()

        def _run_epoch(self):
            for source, targets in self.data:
                self._run_batch(source.to(self.gpu_id), targets.to(self.gpu_id))

        def save(self):
            torch.save(self.model.module.state_dict(), "checkpoint.pt")

        def train(self, epochs):
            for epoch in range(epochs):
                self._run_epoch()
                self.save()

    def main(model, data, optimizer):
        Trainer(model, data, optimizer, 0).train(2)
"""


def test_a_ddp_trainer_that_saves_the_wrapped_module_is_located() -> None:
    found, plan, fixed = planned(DDP_TRAINER, "GD-RUN-FP32-COMPUTE", "GD-RUN-LAUNCH-BOUND")
    assert found.model == "self.model" and found.forward is not None
    kinds = {c.kind: [o.at[0] for o in c.ops] for c in plan.changes}
    assert kinds["bf16"] == [16] and kinds["compile"] == [12]  # at the DDP wrap, the last assignment
    # the inner module compiled, then wrapped (PyTorch's "Where to apply torch.compile?")
    assert fixed.index("self.model.compile()") < fixed.index("self.model = DDP(self.model")


DATA_PARALLEL = """
    import torch
    from torch import nn

    device = "cuda" if torch.cuda.is_available() else "cpu"
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.LazyLinear(10))
    net = net.to(device)
    if device == "cuda":
        net = nn.DataParallel(net)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    for step in range(3):
        x, y = torch.randn(2, 3, 8, 8, device=device), torch.randint(0, 10, (2,), device=device)
        loss = nn.functional.cross_entropy(net(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_no_compile_under_data_parallel_nor_in_a_script_that_compiles() -> None:
    _, plan, _ = planned(DATA_PARALLEL, "GD-RUN-LAUNCH-BOUND")
    assert not plan.changes and "nn.DataParallel (line 9)" in advice(plan, "compile")
    own = DATA_PARALLEL.replace("        net = nn.DataParallel(net)", "        net = torch.compile(net)")
    _, plan, _ = planned(own, "GD-RUN-LAUNCH-BOUND")
    assert not plan.changes and "compiles already (line 9)" in advice(plan, "compile")
    _, plan, _ = planned(DATA_PARALLEL.replace("        net = nn.DataParallel(net)", "        pass"), "GD-RUN-LAUNCH-BOUND")
    assert [c.kind for c in plan.changes] == ["compile"]


def test_channels_last_for_a_conv_net_defined_in_a_module_of_the_project(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "nets").mkdir()
    (tmp_path / "nets" / "__init__.py").write_text("from .small import *\n")
    (tmp_path / "nets" / "small.py").write_text(
        "from torch import nn\n\n\ndef SmallNet():\n"
        "    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(144, 2))\n")
    source = textwrap.dedent("""
        import torch
        from nets import *

        net = SmallNet()
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for i in range(3):
            x = torch.randn(2, 3, 8, 8)
            loss = net(x).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        print("done")
    """)
    script = tmp_path / "train.py"
    script.write_text(source)
    found, plan, fixed = planned(source, "GD-RUN-CHANNELS-LAST", config=CPU, path=script)
    assert found.conv and [c.kind for c in plan.changes] == ["channels_last"]
    assert "net = net.to(memory_format=torch.channels_last)" in fixed
    (tmp_path / "small.py").write_text("")  # not imported: a model module elsewhere is not looked at
    assert not locate(source).conv  # the file alone builds no convolution
    runs(fixed, tmp_path)


ACCUMULATION = """
    import torch
    from torch import nn

    model = nn.Linear(4, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    data = torch.randn(64, 4)
    for it in range(4):
        for micro in range(2):
            x = data[micro * 8:(micro + 1) * 8]
            pred = model(x)
            loss = pred.pow(2).mean() / 2
            scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
    print("done")
"""


def test_gradient_accumulation_with_the_step_in_the_loop_around(tmp_path: Path) -> None:
    found, plan, fixed = planned(ACCUMULATION, "GD-RUN-FP32-COMPUTE", "GD-RUN-LAUNCH-BOUND", config=CPU)
    assert found.loop is not None and found.loop.lineno == 10  # the micro-step loop, where the batch is
    assert found.optimizer == "optimizer" and found.loss == "loss" and found.model == "model"
    bf16 = next(c for c in plan.changes if c.kind == "bf16")
    assert [o.at[0] for o in bf16.ops] == [12]
    assert "scaler.step(optimizer)" in fixed
    runs(fixed.replace("model.compile()\n", ""), tmp_path)


# round two (benchmarks/results/fix/wild2-cpu.md): shapes from yunjey/pytorch-tutorial and PyTorch-GAN

CHAINED = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cpu")
data = DataLoader(TensorDataset(torch.rand(32, 1, 4, 4), torch.zeros(32)), batch_size=8, shuffle=True)
model = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 16), nn.Sigmoid()).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(2):
    for x, _ in data:
        x = x.to(device).view(-1, 16)
        out = model(x)
        loss = {loss}
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
print("done")
"""


def test_non_blocking_lands_on_the_copy_not_the_chained_view(tmp_path):
    """``x.to(device).view(-1, n)``: both calls start at ``x``; non_blocking goes on ``.to`` only."""
    _, plan, fixed = planned(CHAINED.format(loss="F.mse_loss(out, x)"), "GD-RUN-H2D-BLOCKING", config=CPU)
    assert "x = x.to(device, non_blocking=True).view(-1, 16)" in fixed
    runs(fixed, tmp_path)


def test_bce_on_probabilities_keeps_bf16_as_advice():
    """CUDA autocast raises on binary_cross_entropy: bf16 is advice naming the logits form."""
    for loss in ("F.binary_cross_entropy(out, x)", "nn.BCELoss()(out, x)"):
        _, plan, fixed = planned(CHAINED.format(loss=loss), "GD-RUN-FP32-COMPUTE")
        assert "autocast" not in fixed
        assert "BCEWithLogitsLoss" in advice(plan, "bf16")
    _, plan, fixed = planned(CHAINED.format(loss="F.binary_cross_entropy_with_logits(out, x)"), "GD-RUN-FP32-COMPUTE")
    assert 'torch.autocast("cuda"' in fixed


def test_gradient_penalty_blocks_compile():
    """A WGAN-GP style penalty (autograd.grad with create_graph=True) differentiates through the
    model twice: no ``model.compile()``, advice says why; without it the model is compiled."""
    penalty = ("mixed = x.clone().requires_grad_(True); "
               "grads = torch.autograd.grad(model(mixed).sum(), mixed, create_graph=True)[0]; "
               "loss = F.mse_loss(out, x) + grads.pow(2).mean()")
    src = CHAINED.format(loss="F.mse_loss(out, x)").replace("loss = F.mse_loss(out, x)", penalty)
    _, plan, fixed = planned(src, "GD-RUN-LAUNCH-BOUND")
    assert ".compile()" not in fixed
    assert "double backward" in advice(plan, "compile")
    _, plan, fixed = planned(CHAINED.format(loss="F.mse_loss(out, x)"), "GD-RUN-LAUNCH-BOUND")
    assert "model.compile()" in fixed
