"""``gpudoctor fix`` on loops that train two models (GANs) and on models wrapped in DDP
(benchmarks/results/fix/wild2-cpu.md: yt_gan, gan_dcgan, vicreg, barlowtwins), each on a small
script written here:

- two conv nets, two optimizers: ``compile`` and ``channels_last`` on both, the real images made
  channels-last, the generator's output not (it is already); the patched copy trains on the CPU;
- a conv net and an MLP: channels-last on the conv net only, compile on both;
- an optimizer over ``itertools.chain(...)`` of two models: not located, so advice for all;
- ``model = DDP(model)``: channels-last and compile on the inner module, before the wrap;
- a DistributedSampler whose epoch loop calls ``set_epoch`` already: nothing added;
- ``nn.Lazy*`` modules: channels-last is advice (converting raises before the first forward);
- autocast or compile behind the script's own off-by-default ``store_true`` flag: the advice names it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from fix_planning import advice, planned, runs

GAN = """
    import torch
    from torch import nn


    class Gen(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 8 * 4 * 4)
            self.conv = nn.Conv2d(8, 3, 3, padding=1)

        def forward(self, z):
            return torch.tanh(self.conv(self.fc(z).view(-1, 8, 4, 4)))


    class Critic(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.LeakyReLU(0.2), nn.Flatten())
            self.head = nn.Linear(8 * 2 * 2, 1)

        def forward(self, x):
            return self.head(self.body(x))


    netg = Gen()
    netd = Critic()
    opt_g = torch.optim.Adam(netg.parameters(), lr=1e-3)
    opt_d = torch.optim.Adam(netd.parameters(), lr=1e-3)
    bce = nn.BCEWithLogitsLoss()
    data = [torch.randn(4, 3, 4, 4) for _ in range(3)]
    for epoch in range(1):
        for real in data:
            z = torch.randn(4, 4)
            fake = netg(z)
            d_loss = bce(netd(real), torch.ones(4, 1)) + bce(netd(fake.detach()), torch.zeros(4, 1))
            opt_d.zero_grad()
            d_loss.backward()
            opt_d.step()
            g_loss = bce(netd(fake), torch.ones(4, 1))
            opt_g.zero_grad()
            g_loss.backward()
            opt_g.step()
    print("done")
"""


def test_both_models_of_a_gan_get_compile_and_channels_last(tmp_path: Path) -> None:
    _, plan, fixed = planned(GAN, "GD-RUN-CHANNELS-LAST", "GD-RUN-LAUNCH-BOUND")
    assert {c.kind for c in plan.changes} == {"channels_last", "compile"}
    for model in ("netg", "netd"):
        assert f"{model}.compile()" in fixed
        assert f"{model} = {model}.to(memory_format=torch.channels_last)" in fixed
    # the real images before the critic's first call; the latent (2-D: the guard keeps it) before the
    # generator's; the generator's output is channels-last already
    assert "real = real.contiguous(memory_format=torch.channels_last) if real.dim() == 4 else real" in fixed
    assert "z = z.contiguous(" in fixed and "fake = fake.contiguous(" not in fixed
    assert fixed.index("real = real.contiguous(") < fixed.index("d_loss = bce(netd(real)")
    # the copy without compile (inductor takes minutes on this CPU) trains
    _, _, converted = planned(GAN, "GD-RUN-CHANNELS-LAST")
    runs(converted, tmp_path)


def test_channels_last_only_on_the_conv_net_compile_on_both() -> None:
    mlp = GAN.replace("netd = Critic()", "netd = nn.Sequential(nn.Flatten(), nn.Linear(48, 1))")
    _, plan, fixed = planned(mlp, "GD-RUN-CHANNELS-LAST", "GD-RUN-LAUNCH-BOUND")
    assert "netg = netg.to(memory_format=torch.channels_last)" in fixed
    assert "netd = netd.to(memory_format" not in fixed and "real = real.contiguous(" not in fixed
    assert "netg.compile()" in fixed and "netd.compile()" in fixed


def test_a_model_not_located_makes_both_changes_advice() -> None:
    chained = GAN.replace("import torch\n", "import itertools\n    import torch\n", 1).replace(
        "opt_g = torch.optim.Adam(netg.parameters(), lr=1e-3)",
        "opt_g = torch.optim.Adam(itertools.chain(netg.parameters(), netd.body.parameters()), lr=1e-3)")
    assert chained != GAN
    _, plan, fixed = planned(chained, "GD-RUN-CHANNELS-LAST", "GD-RUN-LAUNCH-BOUND")
    assert not plan.changes and ".compile()" not in fixed and "channels_last" not in fixed
    for kind in ("compile", "channels_last"):
        assert "steps 2 optimizers" in advice(plan, kind) and "some of its models only" in advice(plan, kind)


DDP_SCRIPT = """
    import os
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=0, world_size=1)
    dataset = torch.utils.data.TensorDataset(torch.randn(8, 3, 8, 8), torch.randint(0, 4, (8,)))
    sampler = torch.utils.data.distributed.DistributedSampler(dataset)
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, sampler=sampler)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(144, 4))
    model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    dist.destroy_process_group()
    print("done")
"""


def test_channels_last_and_compile_go_on_the_module_before_the_ddp_wrap(tmp_path: Path) -> None:
    _, plan, fixed = planned(DDP_SCRIPT, "GD-RUN-CHANNELS-LAST", "GD-RUN-LAUNCH-BOUND")
    wrap = fixed.index("model = DistributedDataParallel(model)")
    assert fixed.index("model = model.to(memory_format=torch.channels_last)") < wrap
    assert fixed.index("model.compile()") < wrap
    assert "x = x.contiguous(memory_format=torch.channels_last)" in fixed
    _, _, converted = planned(DDP_SCRIPT, "GD-RUN-CHANNELS-LAST")
    runs(converted, tmp_path)


def test_set_epoch_called_already_adds_nothing() -> None:
    _, plan, fixed = planned(DDP_SCRIPT, "GD-RUN-NO-SET-EPOCH")
    assert not plan.changes and fixed.count("set_epoch") == 1
    assert any("already calls sampler.set_epoch" in a.reason for a in plan.advice)
    missing = DDP_SCRIPT.replace("        sampler.set_epoch(epoch)\n", "")
    _, plan, fixed = planned(missing, "GD-RUN-NO-SET-EPOCH")
    assert [c.kind for c in plan.changes] == ["set_epoch"] and fixed.count("sampler.set_epoch(epoch)") == 1
    assert textwrap.dedent(missing) != textwrap.dedent(DDP_SCRIPT)


def test_lazy_modules_keep_channels_last_as_advice(tmp_path: Path) -> None:
    """``nn.LazyLinear`` has no parameters before the first forward: converting the model raises
    (checked here on the unpatched form), so channels-last is advice; compile still applies."""
    lazy = DDP_SCRIPT.replace("nn.Linear(144, 4)", "nn.LazyLinear(4)")
    _, plan, fixed = planned(lazy, "GD-RUN-CHANNELS-LAST", "GD-RUN-LAUNCH-BOUND")
    assert [c.kind for c in plan.changes] == ["compile"] and "channels_last" not in fixed
    assert "nn.LazyLinear at line 14" in advice(plan, "channels_last")
    probe = tmp_path / "probe.py"
    probe.write_text("import torch\nfrom torch import nn\n"
                     "m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.LazyLinear(4))\n"
                     "try:\n    m.to(memory_format=torch.channels_last)\nexcept ValueError:\n    print('raises')\n")
    out = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "raises"


SWITCHED = """
    import argparse
    import torch
    from torch import nn

    parser = argparse.ArgumentParser()
    parser.add_argument("--amp", action="store_true", help="bf16 autocast")
    parser.add_argument("--compile", action="store_true")
    args = parser.parse_args()
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    if args.compile:
        model.compile()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        x, y = torch.randn(4, 8), torch.randn(4, 1)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
            loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_a_store_true_switch_is_named_not_patched() -> None:
    """The script's own off-by-default switch is a command-line change (fix/switches.py; it was
    text advice before round six): the source is not patched again, the run adds the flag."""
    _, plan, fixed = planned(SWITCHED, "GD-RUN-FP32-COMPUTE", "GD-RUN-LAUNCH-BOUND")
    assert "bfloat16, enabled=args.amp" in fixed and fixed.count(".compile()") == 1
    flags = {c.kind: [e.flags[0] for e in c.switches] for c in plan.changes}
    assert flags["bf16"] == ["--amp"] and flags["compile"] == ["--compile"]
    assert all(not c.ops for c in plan.changes if c.kind in ("bf16", "compile"))
    on = SWITCHED.replace('"--amp", action="store_true"', '"--amp", action="store_true", default=True')
    _, plan, _ = planned(on, "GD-RUN-FP32-COMPUTE")
    assert advice(plan, "bf16") == "bf16: the script already uses autocast"
